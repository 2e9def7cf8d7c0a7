// Package fleet assembles one fleet member: a NATS connection (or an embedded
// JetStream server when no URL is given), the fleet's streams and buckets, the
// runner with its providers, and a lanes worker driving it. cmd/worker is its
// flag-parsing front; integration tests and the benchmark start members
// in-process through it.
//
// Where things are:
//
//	fleet.go    the composition root: Start builds a Member, Run serves it, close ends it
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

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/agentstore"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/blockchunk"
	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/metrics"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/anthropic"
	"github.com/lanefleet/lanefleet/provider/local"
	"github.com/lanefleet/lanefleet/provider/registry"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/sandbox"
	"github.com/lanefleet/lanefleet/schedstore"
	"github.com/lanefleet/lanefleet/secretexec"
	"github.com/lanefleet/lanefleet/sessionindex"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
	"github.com/lanefleet/lanefleet/tools/sessions"
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

// build prepares the member once connected: its models, the fleet's
// streams and buckets, the remote tools, the runner and the lanes worker.
func (m *Member) build(ctx context.Context) error {
	cfg := m.cfg
	if err := cfg.ToolPolicy.Validate(); err != nil {
		return fmt.Errorf("fleet: tool policy: %w", err)
	}
	if err := cfg.Skills.Validate(); err != nil {
		return fmt.Errorf("fleet: skills configuration: %w", err)
	}
	res, err := m.buildModels(ctx)
	if err != nil {
		return err
	}
	if err := m.openStateRetrying(ctx); err != nil {
		return err
	}
	if err := m.startRemoteTools(ctx); err != nil {
		return err
	}
	rcfg, err := m.runnerConfig(ctx, res)
	if err != nil {
		return err
	}
	if m.Runner, err = runner.New(rcfg); err != nil {
		return err
	}
	lcfg := lanes.Config{
		ID: cfg.WorkerID, Concurrency: cfg.Concurrency, MaxPayload: cfg.MaxPayload, MaxInflightBytes: cfg.MaxInflightBytes,
		LaneTurnBudget: cfg.LaneTurnBudget, LaneTimeBudget: cfg.LaneTimeBudget, Linger: cfg.Linger, SetupConcurrency: cfg.SetupConcurrency,
		ShutdownGrace: cfg.ShutdownGrace, Logger: cfg.Logger, SessionTTL: cfg.SessionTTL, RetentionRate: cfg.RetentionRate, CheckSettings: m.checkSettings,
		ChatCommands: !cfg.NoChatCommands, ChatDefaults: m.chatDefaults(),
		Liveness: m.liveness, LivenessEvery: cfg.LivenessEvery, Index: laneIndex{m.index},
	}
	if m.agents != nil {
		lcfg.CommandsOff = m.commandsOff
	}
	if m.budgets != nil {
		lcfg.Paused, lcfg.Tenant, lcfg.PauseNotice = m.budgets.Paused, m.budgets.Tenant, m.budgets.PauseNotice
		if weights := cfg.TenantWeights; len(weights) > 0 {
			lcfg.TenantWeight = func(tenant string) int { return weights[tenant] }
		}
	}
	// A sub-agent delivers its completion only within its tenant (every
	// worker, session tools on or off: a child's lane may run anywhere).
	lineage := sessions.Policy{Tenants: m.Tenants()}
	lcfg.Lineage, lcfg.SealKey = lineage.Allows, m.sealKey
	if m.Worker, err = lanes.NewWorker(m.JS, m.Streams, m.Lanes, lanes.HandlerFunc(m.observe), lcfg); err != nil {
		return err
	}
	return m.startToolState(m.toolSrc)
}

// buildModels makes the member's model resolver and decides its models:
// the default model, the auth pins, the credentials and the model policy.
func (m *Member) buildModels(ctx context.Context) (*registry.Resolver, error) {
	cfg := m.cfg
	var sp *scripted.Provider
	if cfg.Scripted {
		sp = scripted.New(scripted.Config{Delay: cfg.ScriptedDelay, Scripts: cfg.Scripts})
	}
	cfg.Redactor.Add(cfg.OpenAICompatibleKey) // before the server's answers are logged
	cat, served, err := loadCatalog(ctx, cfg, cfg.Logger)
	if err != nil {
		return nil, err
	}
	res := registry.NewResolver(registry.ResolverConfig{Env: cfg.Env, Scripted: sp, Catalog: cat, Served: served, Logger: cfg.Logger,
		Keys: map[string]provider.Secret{local.ProviderName: provider.Secret(cfg.OpenAICompatibleKey)}})
	m.resolver = res
	m.defaultModel = cfg.DefaultModel
	if m.defaultModel == "" {
		m.defaultModel = res.DefaultModel()
	}
	hint := openAIBaseURLHint(cfg.Env)
	if m.defaultModel == "" {
		if hint != "" {
			hint = " (" + hint + ")"
		}
		return nil, errors.New("fleet: no model: set a provider's API key (ANTHROPIC_API_KEY, OPENAI_API_KEY, …), serve a local server's models with --openai-compatible URL, name one with --model, or start with --scripted for the built-in test models" + hint)
	}
	if hint != "" && cfg.OpenAICompatible == "" {
		m.log.Warn().Msg(hint)
	}
	if m.pins, err = authprofile.NewPins(cfg.AllowAuthPins...); err != nil {
		return nil, fmt.Errorf("fleet: --allow-auth-pins: %w", err)
	}
	creds, exec, err := authstore.LoadCredentials(ctx, authstore.CredentialsConfig{Path: cfg.AuthProfiles, Env: cfg.Env, SecretExec: cfg.SecretExec})
	if err != nil {
		return nil, err
	}
	m.creds, m.secretExec = creds, exec
	if m.models, err = res.Policy(m.defaultModel, cfg.Fallbacks, cfg.AllowModels, creds); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	// The configured models' series start at 0, under the names their
	// calls are counted by.
	for _, ref := range append([]string{m.defaultModel}, cfg.Fallbacks...) {
		m.obs.metrics.Expect(res.Canonical(ref))
	}
	if short := cfg.Redactor.Add(secrets(cfg, creds, fleetAuth{env: cfg.Env, exec: exec}.SecretSources())...); len(short) > 0 {
		m.log.Warn().Int("count", len(short)).Int("min_bytes", redact.MinLen).Msg("configured secrets too short to be masked in events, transcripts and logs")
	}
	return res, nil
}

// openStateRetrying opens the fleet's streams and buckets, asking again
// while a cluster may still be electing leaders right after start.
func (m *Member) openStateRetrying(ctx context.Context) error {
	var err error
	for attempt := 0; ; attempt++ {
		err = m.openState(ctx)
		if err == nil || attempt >= 10 || ctx.Err() != nil || storageHint(err) != "" {
			break
		}
		if openStateBackoff.Wait(ctx, attempt+1) != nil {
			break // err is the last try's
		}
	}
	if err != nil {
		return fmt.Errorf("fleet: prepare streams and buckets: %w%s", err, storageHint(err))
	}
	return nil
}

// startRemoteTools discovers the remote tools the member may use (none
// unless listed).
func (m *Member) startRemoteTools(ctx context.Context) error {
	cfg := m.cfg
	var err error
	if !cfg.NoRemoteTools && len(cfg.RemoteTools) > 0 {
		dc := remote.DiscoverConfig{Allow: cfg.RemoteTools, Reserved: tools.BuiltinNames(), Logger: cfg.Logger}
		if m.Tools, err = remote.NewRegistry(m.Conn, dc); err != nil {
			return fmt.Errorf("fleet: --remote-tools: %w", err)
		}
		// Know the tools served now before the first turn; Run refreshes.
		if err := m.Tools.Refresh(ctx); err != nil {
			m.log.Warn().Err(err).Msg("remote tools: first discovery failed")
		}
	}
	return nil
}

// runnerConfig is the runner's configuration: the tool source, the
// compactor, the masked and observed resolver, the hooks.
func (m *Member) runnerConfig(ctx context.Context, res *registry.Resolver) (runner.Config, error) {
	cfg := m.cfg
	web, err := webTools(cfg, m.creds)
	if err != nil {
		return runner.Config{}, err
	}
	ts, err := newToolSource(ctx, cfg, m.Tools, m.storeDir)
	if err != nil {
		return runner.Config{}, err
	}
	ts.web = web
	m.disk = ts.disk
	m.toolSrc = ts
	compactor := runner.PiCompactor{Settings: compaction.DefaultSettings()}
	compactor.Settings.Enabled = !cfg.NoCompaction
	// Model output is masked before the observer sees it (a span's status
	// holds the provider's error).
	resolver := observedResolver{Resolver: maskingResolver{Resolver: res, red: cfg.Redactor}, obs: &m.obs}
	if m.oauth == nil && m.Auth != nil {
		if m.oauth, err = openOAuth(cfg, m.creds, m.Auth); err != nil {
			return runner.Config{}, fmt.Errorf("fleet: %w", err)
		}
	}
	rcfg := runner.Config{DefaultModel: m.defaultModel, Fallbacks: cfg.Fallbacks, Resolver: resolver, Logger: cfg.Logger,
		Auth: fleetAuth{s: m.Auth, creds: m.creds, env: cfg.Env, exec: m.secretExec, seen: &seenSecrets{red: cfg.Redactor}, oauth: m.oauth}, Tools: ts, Compactor: compactor, AttemptTimeout: cfg.AttemptTimeout,
		MaxToolIterations: cfg.MaxToolIterations, MaxToolRepeats: cfg.MaxToolRepeats, Retry: cfg.Retry, ToolPolicy: cfg.ToolPolicy,
		MemoryFlush: cfg.MemoryTools && !cfg.NoMemoryFlush}
	if m.budgets != nil {
		rcfg.Admission = m.budgets
	}
	if cfg.BlockReplies {
		bc := blockchunk.DefaultConfig(0)
		rcfg.BlockReplies = &bc
	}
	if len(cfg.Hooks.Names) > 0 {
		if err := m.startHooks(ctx, &rcfg); err != nil {
			return runner.Config{}, err
		}
	}
	return rcfg, nil
}

// openStateBackoff is the wait between tries to open the fleet's streams
// and buckets at start: 200ms longer each time.
var openStateBackoff = backoff.Policy{Base: 200 * time.Millisecond, Linear: true}

// openState creates or binds the fleet's streams and buckets, skipping
// those already open.
func (m *Member) openState(ctx context.Context) error {
	cfg := m.cfg
	var err error
	if m.Streams == nil {
		sc := lanes.StreamConfig{Replicas: cfg.Replicas, AckWait: cfg.AckWait,
			InboundMaxBytes: cfg.Limits.Inbound, EventMaxBytes: cfg.Limits.Events, DeadMaxBytes: cfg.Limits.Dead,
			LaneMaxMsgs: cfg.Limits.LaneMessages, LaneMaxBytes: cfg.Limits.LaneBytes, MaxPayload: cfg.MaxPayload,
			EventMaxAge: cfg.EventMaxAge}
		if m.Streams, err = lanes.EnsureStreams(ctx, m.JS, sc); err != nil {
			return err
		}
		if now, want := m.Streams.LaneCap(), sc.LaneCap(); now != want {
			m.log.Warn().Int64("lane_cap", now).Int64("configured", want).
				Msg("a session's lane holds more messages than --lane-max-messages/--lane-max-bytes allow: its cap stays above them, and is lowered as the lanes drain")
		}
	}
	if m.Lanes == nil {
		if m.Lanes, err = kvstore.Open(ctx, m.JS, kvstore.Config{Replicas: cfg.Replicas, LeaseTTL: cfg.LeaseTTL, MaxBytes: cfg.Limits.Lanes, StepsMaxBytes: cfg.Limits.Steps}); err != nil {
			return err
		}
	}
	if m.liveness == nil && cfg.LivenessEvery >= 0 {
		if m.liveness, err = kvstore.OpenLiveness(ctx, m.JS, kvstore.LivenessConfig{Replicas: cfg.Replicas, TTL: cfg.LivenessTTL}); err != nil {
			return err
		}
	}
	if m.sealKey == nil {
		if m.sealKey, err = m.Lanes.SealKey(ctx); err != nil {
			return err
		}
	}
	if m.Auth == nil {
		authCfg := authprofile.Config{Fleet: authprofile.FleetDefaults()}
		if m.Auth, err = authstore.Open(ctx, m.JS, authstore.Config{Replicas: cfg.Replicas, Auth: authCfg, Logger: cfg.Logger, MaxBytes: cfg.Limits.Auth}); err != nil {
			return err
		}
	}
	if m.budgets == nil && !cfg.NoBudgets {
		if err := m.openBudgets(ctx); err != nil {
			return err
		}
	}
	if m.schedules == nil && !cfg.NoSchedules {
		if err := m.openSchedules(ctx); err != nil {
			return err
		}
	}
	if m.agents == nil && !cfg.NoAgents {
		if err := m.openAgents(ctx); err != nil {
			return err
		}
	}
	if m.Runs == nil {
		if m.Runs, err = kvstore.OpenRuns(ctx, m.JS, kvstore.RunsConfig{Replicas: cfg.Replicas, MaxAge: cfg.RunsRegistryTTL, MaxBytes: cfg.Limits.Runs}); err != nil {
			return err
		}
	}
	if m.index == nil {
		if m.index, m.indexNew, err = sessionindex.Ensure(ctx, m.JS, sessionindex.Config{Replicas: cfg.Replicas, MaxBytes: cfg.Limits.Sessions, LanesMaxBytes: cfg.Limits.Lanes, Logger: cfg.Logger}); err != nil {
			return err
		}
	}
	return nil
}

// storageHint explains an error creating a stream or bucket whose byte
// limit the server cannot reserve; it is empty for other errors.
func storageHint(err error) string {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return ""
	}
	switch apiErr.ErrorCode {
	case 10023, 10028, 10047: // insufficient resources, memory, storage
		return " (the server cannot reserve the byte limits of the fleet's streams and buckets: lower the worker's --max-*-bytes limits or raise the server's JetStream max_file_store/max_memory_store)"
	}
	return ""
}

// ClientURL returns the URL clients and other workers use, without
// credentials.
func (m *Member) ClientURL() string { return m.Conn.ConnectedUrlRedacted() }

// Run processes lanes and serves the lane service (lanes/service) until ctx
// is done, then stops gracefully and closes the connection and the embedded
// server.
func (m *Member) Run(ctx context.Context) error {
	defer m.close()
	defer m.bg.Wait() // the registry writes of the last turns, before the close
	// The lane service answers clients' reads of their sessions while the
	// member runs lanes.
	svc, err := sessionsvc.Serve(m.Conn, sessionsvc.Config{Lanes: m.Lanes, Inbound: m.Streams.Inbound, Events: m.Streams.Events,
		Worker: m.Worker.ID(), Logger: m.log})
	if err != nil {
		return fmt.Errorf("fleet: lane service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	// The admin service answers operators (admin role) fleet-wide, and
	// says how this worker does in micro's STATS.
	sampled, stopSampling := make(chan struct{}), make(chan struct{})
	go func() { defer close(sampled); m.sampleTurns(stopSampling) }()
	defer func() { close(stopSampling); <-sampled }()
	if m.indexNew {
		m.seedIndex(ctx)
	}
	adm, err := admin.Serve(m.Conn, admin.Config{JS: m.JS, Inbound: m.Streams.Inbound, Events: m.Streams.Events, Dead: m.Streams.Dead,
		Runs: m.Runs, Lanes: m.Lanes, Index: m.index, Auth: m.authBook(), Worker: m.Worker.ID(), Stats: m.workerStats, Forget: m.forget, Scheduled: m.scheduled, Logger: m.log})
	if err != nil {
		return fmt.Errorf("fleet: admin service: %w", err)
	}
	defer func() { _ = adm.Stop() }()
	if m.metricsSrv != nil {
		defer m.serveMetrics()()
	}
	// Jobs of their own until the worker stops, stopped in reverse order.
	for _, job := range m.backgroundJobs() {
		defer background(ctx, job)()
	}
	return m.Worker.Run(ctx)
}

// seedIndex fills the session index of a fleet that ran without one from
// the stored sessions, in the background: their listings come back once
// they are in it.
func (m *Member) seedIndex(ctx context.Context) {
	m.bg.Go(func() {
		n, err := admin.SeedIndex(ctx, admin.Config{Inbound: m.Streams.Inbound, Events: m.Streams.Events, Runs: m.Runs, Index: m.index, Logger: m.log})
		if err != nil && ctx.Err() == nil {
			m.log.Warn().Err(err).Int("sessions", n).Msg("session index: filling it from the stored sessions stopped")
		} else if n > 0 {
			m.log.Info().Int("sessions", n).Msg("session index: filled from the stored sessions")
		}
	})
}

// serveMetrics serves /metrics until stop closes the listener (within
// closeTimeout) and waits for it.
func (m *Member) serveMetrics() (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.metricsSrv.Serve(); err != nil {
			m.log.Error().Err(err).Msg("metrics listener stopped")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = m.metricsSrv.Close(ctx)
		<-done
	}
}

// backgroundJobs are the member's jobs that run while its worker runs, in
// the order they start, each where it is configured: the remote tools'
// refresh, the idle release, the budgets' resumes, the schedules, the exec
// secret providers' refresh and the hooks' refresh.
func (m *Member) backgroundJobs() []func(context.Context) {
	var jobs []func(context.Context)
	if m.Tools != nil {
		jobs = append(jobs, func(ctx context.Context) {
			_ = m.Tools.Run(ctx) // refreshes the remote tools until cancelled
		})
	}
	if after := m.cfg.IdleRelease; after >= 0 {
		if after == 0 {
			after = IdleReleaseDefault
		}
		jobs = append(jobs, func(ctx context.Context) {
			m.releaseWhenIdle(ctx, after, m.Worker.Stats().Turns.Load)
		})
	}
	if m.budgets != nil {
		jobs = append(jobs, func(ctx context.Context) { m.budgets.run(ctx, m.Worker.Wake) })
	}
	if m.schedules != nil {
		jobs = append(jobs, m.runSchedules)
	}
	if m.secretExec != nil {
		jobs = append(jobs, m.refreshSecrets)
	}
	if m.Hooks != nil {
		jobs = append(jobs, func(ctx context.Context) {
			_ = m.Hooks.Run(ctx) // refreshes the hooks until cancelled
		})
	}
	return jobs
}

// refreshSecrets runs the exec secret providers' refreshes until ctx is
// done. A failed refresh keeps the last values; what it says names the
// provider, never what the command printed.
func (m *Member) refreshSecrets(ctx context.Context) {
	m.secretExec.Run(ctx, func(vals []provider.Secret) {
		var forms []string
		for _, v := range vals {
			forms = append(forms, secretForms(v.Reveal())...)
		}
		m.cfg.Redactor.Add(forms...) // before any call uses them; one Add rebuilds the set once
	}, func(err error) {
		m.log.Warn().Err(err).Msg("exec secret provider refresh failed; the last values stay in use")
	})
}

// background runs fn in a goroutine of its own; stop cancels the context
// fn was given and waits for fn to return.
func background(ctx context.Context, fn func(context.Context)) (stop func()) {
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(bctx)
	}()
	return func() { cancel(); <-done }
}

// MetricsAddr returns the address /metrics is served on, or "" when off.
func (m *Member) MetricsAddr() string {
	if m.metricsSrv == nil {
		return ""
	}
	return m.metricsSrv.Addr()
}

func (m *Member) close() {
	if m.procs != nil {
		m.procs.Close() // before the workspaces' filesystem goes
	}
	if m.Conn != nil && !m.Conn.IsConnected() {
		// The server is gone: nothing to drain, and the auth store's
		// watch stops with the connection (it waited 5 s to unsubscribe,
		// then the connection's errors were logged after the worker had
		// stopped), so the store is told first that this is its end.
		if m.Auth != nil {
			m.Auth.Closing()
		}
		m.Conn.Close()
	}
	if m.oauth != nil {
		m.oauth.Close() // a refresh in flight stores its tokens first
	}
	if m.Auth != nil {
		_ = m.Auth.Close()
	}
	if m.budgets != nil {
		_ = m.budgets.store.Close()
	}
	if m.index != nil {
		_ = m.index.Close()
	}
	if m.agents != nil {
		_ = m.agents.Close()
	}
	if m.agentTmp != "" {
		_ = os.RemoveAll(m.agentTmp)
	}
	if m.Conn != nil && !m.Conn.IsClosed() {
		_ = m.Conn.Drain()
		deadline := time.Now().Add(closeTimeout)
		for !m.Conn.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		m.Conn.Close()
	}
	if m.Server != nil {
		m.Server.Shutdown()
		m.Server.WaitForShutdown()
	}
	if err := m.storeLock.Close(); err != nil {
		m.log.Warn().Err(err).Msg("data directory lock")
	}
	if err := m.disk.Close(); err != nil {
		m.log.Warn().Err(err).Msg("workspace filesystem")
	}
}
