// Package fleet assembles one fleet member: a NATS connection (or an embedded
// JetStream server when no URL is given), the fleet's streams and buckets, the
// runner with its providers, and a lanes worker driving it. cmd/worker is its
// flag-parsing front; integration tests and the benchmark start members
// in-process through it.
//
// Where things are:
//
//	fleet.go    the composition root: Member, and Start, which connects (or embeds a server) and builds one
//	build.go    what a connected Member builds: its models, streams and buckets, remote tools, runner and lanes worker
//	run.go      Run serves a Member (lane service, metrics, background jobs) until its end; close ends it
//	config.go   Config, HooksConfig, Limits
//	connect.go  the embedded server, TLS pinning, the NATS connect options
//	turn.go     the turn adapter: a lane turn in, runner.Input out, the refusals before it
//	runs.go     the active-run registry entry of a turn (and its compaction phase)
//	auth.go     runner.Auth over the auth bucket
//	local.go    the --openai-compatible server's models and the catalog
//	tools.go    the tool source (built-in, remote and client tools, exec's sandbox)
//	observe.go  metrics and tracing of turns, model calls and tool calls
//	redact.go   masking what runs produce
//	gc.go       giving idle memory back
//
// The model resolver and the model policy live in provider/registry.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agentstore"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/metrics"
	"github.com/lanefleet/lanefleet/provider/anthropic"
	"github.com/lanefleet/lanefleet/provider/registry"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/sandbox"
	"github.com/lanefleet/lanefleet/schedstore"
	"github.com/lanefleet/lanefleet/secretexec"
	"github.com/lanefleet/lanefleet/sessionindex"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// Member is a running fleet member.
type Member struct {
	cfg Config
	// sealKey is the fleet's seal key (kvstore.Lanes.SealKey): the
	// lanes check and make seals with it, and sub-agent spawns carry it.
	sealKey []byte
	// liveness is the workers' liveness bucket (nil: fast takeover off).
	liveness *kvstore.Liveness
	Server   *server.Server // nil when joined to an external deployment
	Conn     *nats.Conn
	// connURL and connOpts are how Conn was made (SecondConn repeats
	// them); inProcess says a second connection may be in process.
	connURL   string
	connOpts  []nats.Option
	inProcess bool
	JS        jetstream.JetStream
	Streams   *lanes.Streams
	Lanes     *kvstore.Lanes
	Worker    *lanes.Worker
	Runner    *runner.Runner
	Auth      *authstore.Store
	oauth     *anthropic.OAuth // the Anthropic OAuth profiles' tokens (nil: none)
	Runs      *kvstore.Runs
	// index is the session index the listings page through; indexNew
	// says it was made at this start, so Run fills it from what the
	// fleet stores.
	index    *sessionindex.Index
	indexNew bool
	// budgets is tenant governance (nil with NoBudgets).
	budgets *budgets
	// schedules holds the fleet's schedules (nil with NoSchedules).
	schedules *schedstore.Store
	// agents are the named agents (nil with NoAgents); defaultAgent is
	// the agent of a key that names none; agentTmp a temporary copy
	// directory of their files, removed at the end.
	agents       *agentstore.Cache
	defaultAgent string
	agentTmp     string
	Tools        *remote.Registry // nil when remote tools are off
	Hooks        *hooks.Registry  // nil without hooks
	log          zerolog.Logger
	obs          observer
	creds        *authprofile.Store // the member's auth profiles
	// secretExec holds the exec secret providers' values (nil: none
	// runs); Run refreshes them.
	secretExec *secretexec.Values
	// metricsSrv serves /metrics, /healthz and /readyz; nil when off.
	metricsSrv *metrics.Server
	// storeLock keeps a second embedded server off the data directory.
	storeLock *embedded.StoreLock
	// storeDir is the embedded server's JetStream store ("" when joined).
	storeDir string
	// disk is the workspaces' filesystem (exec), unmounted at the end.
	disk *sandbox.Disk
	// toolSrc is the runs' tool source; procs its background processes
	// (nil without the process tool), killed at the end.
	toolSrc *toolSource
	procs   *tools.Processes

	defaultModel string
	resolver     *registry.Resolver // the models' resolver (/status reads a model's context window)
	models       registry.ModelPolicy
	pins         authprofile.Pins

	// rate is the worker's turn rate, for the admin service's stats.
	rate turnRate

	// bg owns the run registry's background writes: Run waits for them
	// before it closes the connection.
	bg sync.WaitGroup
	// due starts the registry's writers as their runs' entries fall due.
	due dueLine
	// released counts the times the idle member returned its free memory
	// to the operating system (releaseWhenIdle).
	released atomic.Int64
}

// DefaultModel returns the model turns use when the message names none.
func (m *Member) DefaultModel() string { return m.defaultModel }

// Start connects (or starts the embedded server), prepares the fleet's
// streams and buckets, and builds the worker. Call Run to process lanes.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if cfg.Env == nil {
		cfg.Env = os.Getenv
	}
	if cfg.Redactor == nil {
		cfg.Redactor = redact.New()
	}
	m := &Member{cfg: cfg, log: cfg.Logger}
	opts, err := connectOptions(cfg)
	if err != nil {
		return nil, err
	}
	url := cfg.NATSURL
	if cfg.NoBudgets && len(cfg.RateLimits) > 0 {
		return nil, errors.New("fleet: --rate-limit keeps its windows in the budgets bucket, which --no-budgets turns off: drop one of them")
	}
	if url != "" && cfg.NATSMonitor != "" {
		return nil, errors.New("fleet: --nats-monitor serves the embedded server's monitoring, but NATS_URL/--nats-url joins another server: enable monitoring on that server (http_port) instead")
	}
	if url == "" {
		if url, opts, err = m.embed(cfg, opts); err != nil {
			return nil, err
		}
	}
	if err := m.connect(url, opts); err != nil {
		m.close()
		return nil, err
	}
	var reg *metrics.Metrics
	if cfg.MetricsListen != "" {
		reg = metrics.New()
	}
	m.obs = newObserver(cfg, reg)
	if err := m.build(ctx); err != nil {
		m.close()
		return nil, err
	}
	if reg != nil {
		if err := m.listenMetrics(reg); err != nil {
			m.close()
			return nil, err
		}
	}
	if m.storeLock != nil {
		if err := m.storeLock.SetHolder(holder(m.Worker.ID(), m.Server.ClientURL())); err != nil {
			m.log.Warn().Err(err).Str("lock", m.storeLock.Path()).Msg("data directory lock: cannot name this worker in it")
		}
	}
	return m, nil
}

// embed starts the embedded server for a member that joins none: it
// returns the URL to connect to and the connect options, with the server's
// certificate pinned when it serves TLS without a CA to check it by. On an
// error the member is closed.
func (m *Member) embed(cfg Config, opts []nats.Option) (string, []nats.Option, error) {
	srv, sopts, lock, err := startEmbedded(cfg)
	if err != nil {
		return "", nil, err
	}
	m.Server, m.storeLock, m.storeDir = srv, lock, sopts.StoreDir
	m.inProcess = sopts.TLSConfig == nil
	url := embedded.ConnectURL(srv)
	if sopts.TLSConfig != nil && cfg.TLSCA == "" {
		pin, err := pinServerCert(sopts)
		if err != nil {
			m.close()
			return "", nil, err
		}
		opts = append(opts, pin)
	}
	m.log.Info().Str("url", srv.ClientURL()).Str("data_dir", sopts.StoreDir).Bool("sync_always", sopts.SyncAlways).
		Bool("auth", embedded.Authenticates(sopts)).Bool("tls", sopts.TLSConfig != nil).Str("monitor", m.NATSMonitorAddr()).Msg("embedded NATS server started")
	return url, opts, nil
}

// connect connects the member to NATS at url and opens its JetStream
// context; an authorization error says which identity the server wants.
func (m *Member) connect(url string, opts []nats.Option) error {
	m.connURL, m.connOpts = url, opts
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		err = fmt.Errorf("fleet: connect to NATS at %s: %w", redactURL(url), err)
		if errors.Is(err, nats.ErrAuthorization) {
			err = fmt.Errorf("%w (the server requires the worker's identity: --nats-user and NATS_PASSWORD, --creds or --nkey; `worker permissions --role worker` prints what it may do)", err)
		}
		return err
	}
	m.Conn = nc
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(publishAsyncTimeout))
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	m.JS = js
	return nil
}

// listenMetrics watches the member's state in reg and opens the /metrics
// listener; Run serves it.
func (m *Member) listenMetrics(reg *metrics.Metrics) error {
	if err := reg.Watch(m.metricsState()); err != nil {
		return fmt.Errorf("fleet: metrics: %w", err)
	}
	var err error
	if m.metricsSrv, err = metrics.Listen(m.cfg.MetricsListen, metrics.Handler(reg, m.ready, m.log)); err != nil {
		return fmt.Errorf("fleet: %w (give --metrics another address)", err)
	}
	m.log.Info().Str("addr", m.metricsSrv.Addr()).Msg("serving /metrics, /healthz and /readyz")
	return nil
}

// holder describes this process in the data directory's lock.
func holder(worker, listen string) embedded.Holder {
	host, _ := os.Hostname()
	return embedded.Holder{PID: os.Getpid(), Host: host, Worker: worker, Listen: listen, Since: time.Now().UTC().Truncate(time.Second)}
}

// ClientURL returns the URL clients and other workers use, without
// credentials.
func (m *Member) ClientURL() string { return m.Conn.ConnectedUrlRedacted() }
