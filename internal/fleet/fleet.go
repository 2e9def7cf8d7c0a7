// Package fleet assembles one fleet member: a NATS connection (or an embedded
// JetStream server when no URL is given), the fleet's streams and buckets, the
// runner with its providers, and a lanes worker driving it. cmd/worker is its
// flag-parsing front; integration tests and the benchmark start members
// in-process through it.
package fleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/blockchunk"
	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/lanes/service"
	"github.com/lanefleet/lanefleet/metrics"
	"github.com/lanefleet/lanefleet/permission"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/local"
	"github.com/lanefleet/lanefleet/provider/registry"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/sandbox"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// Config configures a member.
type Config struct {
	// The member's connection: to NATSURL, or to the embedded server.
	NATSURL   string // comma-separated server URLs; empty = start an embedded server
	CredsFile string // NATS credentials file
	NKeyFile  string // NKey seed file
	User      string // user name (with Password)
	Password  string // never logged
	// InboxPrefix is the connection's inbox prefix: the one the user's
	// permissions let it subscribe to. Default permission.InboxPrefix(User)
	// when User is set, else NATS's _INBOX.
	InboxPrefix string
	TLSCert     string // client certificate
	TLSKey      string // client key
	// TLSCA is the CA bundle for the server certificate. Without it, the
	// connection to the embedded server trusts exactly the certificate that
	// server presents.
	TLSCA string

	// The embedded server (NATSURL empty).
	// ServerConfig is a nats-server configuration file (users, nkeys,
	// accounts, permissions, TLS, monitoring, ...); DataDir and Listen fill
	// in what it leaves unset and must agree with what it sets, SyncAlways
	// applies when it sets no jetstream sync_interval.
	ServerConfig string
	DataDir      string // JetStream store; required for the embedded server unless ServerConfig names one
	Listen       string // host:port for clients and other workers; default 127.0.0.1:4222
	SyncAlways   bool   // fsync every write before acknowledging (default in cmd/worker)
	// InsecureListen lets the embedded server listen on a non-loopback
	// address without authentication.
	InsecureListen bool

	// The fleet.
	WorkerID      string
	Replicas      int           // stream and bucket replicas (3 on a cluster)
	Concurrency   int           // lanes owned at once by this worker
	AckWait       time.Duration // dispatch AckWait
	LeaseTTL      time.Duration // lane lease TTL
	ShutdownGrace time.Duration
	MaxPayload    int
	// MaxInflightBytes bounds the payload bytes of the lanes running at
	// once (lanes.Config; 0 = the default, negative = none).
	MaxInflightBytes int64
	Limits           Limits // byte limits of the streams and buckets
	// LaneTurnBudget and LaneTimeBudget: how long a lane keeps its slot
	// while other lanes wait for one (lanes.Config; a negative turn
	// budget turns fair scheduling off).
	LaneTurnBudget int
	LaneTimeBudget time.Duration
	// Linger: how long an owner keeps an empty lane after a turn for the
	// session's next message (lanes.Config.Linger; 0 = its default).
	Linger time.Duration
	// SetupConcurrency: how many lanes set up a turn at once
	// (lanes.Config.SetupConcurrency; 0 = its default, negative = no bound).
	SetupConcurrency int
	// Retention (package retention): SessionTTL forgets sessions untouched
	// that long (0 = never); EventMaxAge is how long run events stay
	// replayable (0 = 24 h). Every worker of a fleet should use the same.
	SessionTTL  time.Duration
	EventMaxAge time.Duration
	// IdleRelease is how long the member runs no turn before it returns
	// the memory it no longer uses to the operating system, once per idle
	// spell (0 = IdleReleaseDefault, negative = never).
	IdleRelease time.Duration

	// The runner.
	// DefaultModel is "provider/model-id"; default: the OpenAICompatible
	// server's first chat model, else by the API keys present, else
	// scripted/echo (with Scripted).
	DefaultModel string
	ModelsFile   string // user models file adding to or overriding the built-in catalog (and the server's models)
	// OpenAICompatible is the base URL of an OpenAI-compatible server
	// (llama.cpp's llama-server, vLLM, Ollama, LM Studio; a bare origin gets
	// /v1). Start lists its models (GET <url>/models) and serves them as
	// local/<id> over Chat Completions; its first chat model is the default
	// model when DefaultModel is empty. A server that cannot list its
	// models fails Start with the reason.
	OpenAICompatible string
	// OpenAICompatibleKey is sent to that server as a bearer token; most
	// local servers want none.
	OpenAICompatibleKey string
	// OpenAICompatibleWait is how long Start asks again while the server
	// does not answer or answers 5xx (starting, loading a model); 0 = once.
	OpenAICompatibleWait time.Duration
	// Scripted serves the built-in scripted/* test models (make demo, tests,
	// benchmarks). Never in production: scripted/script plays whatever tool
	// calls the sender writes into the message.
	Scripted      bool
	ScriptedDelay time.Duration // pause before each scripted/echo delta
	// registerAfter replaces the registry's registerAfter (tests).
	registerAfter time.Duration
	Scripts       map[string]scripted.Script
	Fallbacks     []string // model fallback chain after the requested model
	// AllowModels are the models a message may ask for: references or
	// glob patterns (catalog.Allowlist). Empty: the default model, the
	// fallbacks, every catalog and models-file entry, and scripted/* when
	// Scripted is set. A message naming another model ends with an
	// invalid_input error saying which are allowed.
	AllowModels []string
	// AuthProfiles is an auth-profiles.json file of API keys and tokens;
	// keys in the environment (ANTHROPIC_API_KEY, ...) are profiles too.
	AuthProfiles string
	// AllowAuthPins are the auth profiles a message or a session's
	// settings may pin its turns to: profile ids or glob patterns
	// (authprofile.Pins). Empty: none. A turn pinned to another, to a
	// profile that does not exist or to one that is disabled ends with an
	// invalid_input error saying which are allowed.
	AllowAuthPins  []string
	AttemptTimeout time.Duration // one attempt of a run; default 10 minutes
	// MaxToolIterations bounds the model calls of one turn's tool loop;
	// default runner.MaxToolIterationsDefault.
	MaxToolIterations int
	// MaxToolRepeats stops a turn whose model makes the same failing
	// call this many times; default guard.ToolRepeatsDefault.
	MaxToolRepeats int
	// NoStepJournal turns the step journal off: a turn re-run after its
	// worker died then repeats every model and tool call it had made
	// (the journal costs a synchronous write per step).
	NoStepJournal bool
	// ToolPolicy allows, denies and asks approval for tools by name
	// (case-insensitive globs; deny wins; empty Allow = all): refused
	// tools are not offered, and every call of a tool marked Approve ends
	// the run pending until the client answers "approve".
	ToolPolicy tools.Policy
	// Retry is the same-key retry of transient provider failures; zero =
	// runner's defaults (3 tries after 2, 4, 8 s).
	Retry runner.RetryPolicy
	// WorkspaceRoot holds each session's workspace directory for the
	// built-in tools; default <DataDir>/workspaces, else a temp directory.
	WorkspaceRoot  string
	NoBuiltinTools bool // no read/write/edit/exec
	NoRemoteTools  bool // do not discover tools served over NATS
	// RemoteTools lists the tools served over NATS (micro service
	// lanefleet-tools) that runs may use, by name. Nothing discovered is
	// used unless listed; a listed name may not be a built-in tool's.
	RemoteTools []string
	// Hooks configures the run hooks served over NATS (package hooks):
	// the listed names, their timeout and what a before_tool_call hook
	// that cannot decide does. No names: no hooks.
	Hooks        HooksConfig
	NoCompaction bool // no threshold compaction (overflow recovery still compacts)
	// BlockReplies publishes the reply in blocks too (block events, as
	// OpenClaw's block streaming), besides its deltas; off by default, as
	// in the reference (blockStreamingDefault "off").
	BlockReplies bool
	SystemPrompt string // base of every run's system prompt (workspace, skills and context files are added)
	SkillsDir    string // directory of skills (<name>/SKILL.md) every session sees, besides <workspace>/skills
	// Skills configures skills by name (OpenClaw's skills.entries):
	// enabled, and the environment their commands get (exec).
	Skills          agentprompt.SkillConfigs
	RunsRegistryTTL time.Duration // how long a dead run's registry entry lives; default 1 hour
	// Exec offers the exec tool: a shell in the session's workspace,
	// confined by package sandbox. Start fails where the platform cannot
	// confine it, unless ExecUnconfined is also set.
	Exec bool
	// ExecUnconfined runs exec's commands unconfined, with the worker's
	// privileges (only with Exec): for tests only.
	ExecUnconfined bool
	// ExecAllowRoot lets exec's commands run as root (without
	// capabilities, still confined) where the worker runs as root and
	// they cannot run as uid 65534: without user namespaces, or with the
	// workspaces on a filesystem without idmapped mounts. Start fails
	// there otherwise.
	ExecAllowRoot bool
	// ExecCgroup is a cgroup v2 directory delegated to the worker, where
	// each of exec's commands gets a cgroup; empty: package sandbox finds
	// one where it can.
	ExecCgroup string
	// WorkspaceMaxBytes bounds the filesystem of the workspaces with Exec
	// (sandbox.MountDisk): 0 = WorkspaceMaxBytesDefault, -1 = no bound.
	// Unbounded on the JetStream store's filesystem, Start fails unless
	// it is -1.
	WorkspaceMaxBytes int64

	// Operations.
	// MetricsListen is the host:port of the member's /metrics, /healthz
	// and /readyz (package metrics); empty = none. A busy address fails
	// Start.
	MetricsListen string
	// NATSMonitor is the host:port of the embedded server's monitoring
	// endpoints (/varz, /jsz, /healthz, ...); empty = none. They have no
	// authentication: a non-loopback address needs InsecureListen.
	NATSMonitor string
	// TracerProvider records the spans of turns, attempts, model calls
	// and tool calls; nil = none.
	TracerProvider trace.TracerProvider

	Logger zerolog.Logger
	// Redactor holds the member's secrets (keys, tokens, NATS
	// credentials): the member masks them in what its runs produce (model
	// output, tool results, provider errors, hook replies), never in what
	// a sender supplied (package redact); Start adds the secrets it finds
	// in the configuration. Give the one whose Writer masks the logger's
	// output too; default a new one.
	Redactor *redact.Redactor
	// Env reads configuration such as API keys; default os.Getenv. Runs never
	// change the process environment.
	Env func(string) string
}

// HooksConfig configures the run hooks a member calls.
type HooksConfig struct {
	// Names are the hooks runs use, in call order; nothing discovered is
	// used unless listed.
	Names []string
	// Timeout bounds each hook call; default hooks.TimeoutDefault.
	Timeout time.Duration
	// ToolFailure is "closed" (default: a before_tool_call hook that
	// cannot decide blocks the call) or "open" (the call runs unchecked).
	ToolFailure hooks.FailMode
}

// Limits are the byte limits of the fleet's streams and buckets, in bytes:
// 0 is the default (sized for a single node's default 8 GiB store and 256
// MiB of memory), -1 no limit. Every worker of a fleet must use the same.
type Limits struct {
	Inbound int64 // AGENT_IN: unprocessed messages; full = new ones refused (default 1 GiB)
	Events  int64 // AGENT_EV: run events; full = oldest dropped (default 1 GiB)
	Dead    int64 // AGENT_DLQ: dead letters; full = new ones refused (default 256 MiB)
	Lanes   int64 // lanes bucket: transcripts, leases, cursors (default 4 GiB)
	Steps   int64 // AGENT_STEPS: the runs' step journals; full = oldest dropped (default 512 MiB)
	Auth    int64 // auth bucket: auth-profile state (default 64 MiB)
	Runs    int64 // runs bucket (memory): the active-run registry (default 64 MiB)
	// One session's share of AGENT_IN (lanes.StreamConfig): the messages
	// and bytes its lane may hold; at the limit the session's sender is
	// refused and nobody else.
	LaneMessages int64 // default 1,000
	LaneBytes    int64 // default an eighth of Inbound (128 MiB)
}

// Member is a running fleet member.
type Member struct {
	cfg     Config
	Server  *server.Server // nil when joined to an external deployment
	Conn    *nats.Conn
	JS      jetstream.JetStream
	Streams *lanes.Streams
	Lanes   *kvstore.Lanes
	Worker  *lanes.Worker
	Runner  *runner.Runner
	Auth    *authstore.Store
	Runs    *kvstore.Runs
	Tools   *remote.Registry // nil when remote tools are off
	Hooks   *hooks.Registry  // nil without hooks
	log     zerolog.Logger
	obs     observer
	creds   *authprofile.Store // the member's auth profiles
	// metricsSrv serves /metrics, /healthz and /readyz; nil when off.
	metricsSrv *metrics.Server
	// storeLock keeps a second embedded server off the data directory.
	storeLock *embedded.StoreLock
	// storeDir is the embedded server's JetStream store ("" when joined).
	storeDir string
	// disk is the workspaces' filesystem (exec), unmounted at the end.
	disk *sandbox.Disk

	defaultModel string
	models       modelPolicy
	pins         authprofile.Pins

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
	if url != "" && cfg.NATSMonitor != "" {
		return nil, errors.New("fleet: --nats-monitor serves the embedded server's monitoring, but NATS_URL/--nats-url joins another server: enable monitoring on that server (http_port) instead")
	}
	if url == "" {
		srv, sopts, lock, err := startEmbedded(cfg)
		if err != nil {
			return nil, err
		}
		m.Server, m.storeLock, m.storeDir = srv, lock, sopts.StoreDir
		url = embedded.ConnectURL(srv)
		if sopts.TLSConfig != nil && cfg.TLSCA == "" {
			pin, err := pinServerCert(sopts)
			if err != nil {
				m.close()
				return nil, err
			}
			opts = append(opts, pin)
		}
		m.log.Info().Str("url", srv.ClientURL()).Str("data_dir", sopts.StoreDir).Bool("sync_always", sopts.SyncAlways).
			Bool("auth", embedded.Authenticates(sopts)).Bool("tls", sopts.TLSConfig != nil).Str("monitor", m.NATSMonitorAddr()).Msg("embedded NATS server started")
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		m.close()
		err = fmt.Errorf("fleet: connect to NATS at %s: %w", redactURL(url), err)
		if errors.Is(err, nats.ErrAuthorization) {
			err = fmt.Errorf("%w (the server requires the worker's identity: --nats-user and NATS_PASSWORD, --creds or --nkey; `worker permissions --role worker` prints what it may do)", err)
		}
		return nil, err
	}
	m.Conn = nc
	// Async publishes lost in a reconnect are never answered unless they
	// time out.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		m.close()
		return nil, fmt.Errorf("fleet: %w", err)
	}
	m.JS = js
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
		if err := reg.Watch(m.metricsState()); err != nil {
			m.close()
			return nil, fmt.Errorf("fleet: metrics: %w", err)
		}
		if m.metricsSrv, err = metrics.Listen(cfg.MetricsListen, metrics.Handler(reg, m.ready, m.log)); err != nil {
			m.close()
			return nil, fmt.Errorf("fleet: %w (give --metrics another address)", err)
		}
		m.log.Info().Str("addr", m.metricsSrv.Addr()).Msg("serving /metrics, /healthz and /readyz")
	}
	if m.storeLock != nil {
		if err := m.storeLock.SetHolder(holder(m.Worker.ID(), m.Server.ClientURL())); err != nil {
			m.log.Warn().Err(err).Str("lock", m.storeLock.Path()).Msg("data directory lock: cannot name this worker in it")
		}
	}
	return m, nil
}

// holder describes this process in the data directory's lock.
func holder(worker, listen string) embedded.Holder {
	host, _ := os.Hostname()
	return embedded.Holder{PID: os.Getpid(), Host: host, Worker: worker, Listen: listen, Since: time.Now().UTC().Truncate(time.Second)}
}

func (m *Member) build(ctx context.Context) error {
	cfg := m.cfg
	if err := cfg.ToolPolicy.Validate(); err != nil {
		return fmt.Errorf("fleet: tool policy: %w", err)
	}
	if err := cfg.Skills.Validate(); err != nil {
		return fmt.Errorf("fleet: skills configuration: %w", err)
	}
	var sp *scripted.Provider
	if cfg.Scripted {
		sp = scripted.New(scripted.Config{Delay: cfg.ScriptedDelay, Scripts: cfg.Scripts})
	}
	cfg.Redactor.Add(cfg.OpenAICompatibleKey) // before the server's answers are logged
	cat, served, err := loadCatalog(ctx, cfg, cfg.Logger)
	if err != nil {
		return err
	}
	res := NewResolver(ResolverConfig{Env: cfg.Env, Scripted: sp, Catalog: cat, Served: served, Logger: cfg.Logger,
		Keys: map[string]provider.Secret{local.ProviderName: provider.Secret(cfg.OpenAICompatibleKey)}})
	m.defaultModel = cfg.DefaultModel
	if m.defaultModel == "" {
		m.defaultModel = res.DefaultModel()
	}
	hint := openAIBaseURLHint(cfg.Env)
	if m.defaultModel == "" {
		if hint != "" {
			hint = " (" + hint + ")"
		}
		return errors.New("fleet: no model: set a provider's API key (ANTHROPIC_API_KEY, OPENAI_API_KEY, …), serve a local server's models with --openai-compatible URL, name one with --model, or start with --scripted for the built-in test models" + hint)
	}
	if hint != "" && cfg.OpenAICompatible == "" {
		m.log.Warn().Msg(hint)
	}
	if m.pins, err = authprofile.NewPins(cfg.AllowAuthPins...); err != nil {
		return fmt.Errorf("fleet: --allow-auth-pins: %w", err)
	}
	creds, err := authstore.LoadCredentials(cfg.AuthProfiles, cfg.Env)
	if err != nil {
		return err
	}
	m.creds = creds
	if m.models, err = res.policy(cfg, m.defaultModel, creds); err != nil {
		return err
	}
	// The configured models' series start at 0, under the names their
	// calls are counted by.
	for _, ref := range append([]string{m.defaultModel}, cfg.Fallbacks...) {
		m.obs.metrics.Expect(res.canonical(ref))
	}
	if short := cfg.Redactor.Add(secrets(cfg, creds)...); len(short) > 0 {
		m.log.Warn().Int("count", len(short)).Int("min_bytes", redact.MinLen).Msg("configured secrets too short to be masked in events, transcripts and logs")
	}
	// A cluster may still be electing leaders right after start: retry
	// what is not open yet.
	for attempt := 0; ; attempt++ {
		err = m.openState(ctx)
		if err == nil || attempt >= 10 || ctx.Err() != nil || storageHint(err) != "" {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("fleet: prepare streams and buckets: %w%s", err, storageHint(err))
	}
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
	ts, err := newToolSource(ctx, cfg, m.Tools, m.storeDir)
	if err != nil {
		return err
	}
	m.disk = ts.disk
	compactor := runner.PiCompactor{Settings: compaction.DefaultSettings()}
	compactor.Settings.Enabled = !cfg.NoCompaction
	// Model output is masked before the observer sees it (a span's status
	// holds the provider's error).
	resolver := observedResolver{Resolver: maskingResolver{Resolver: res, red: cfg.Redactor}, obs: &m.obs}
	rcfg := runner.Config{DefaultModel: m.defaultModel, Fallbacks: cfg.Fallbacks, Resolver: resolver, Logger: cfg.Logger,
		Auth: fleetAuth{s: m.Auth, creds: creds}, Tools: ts, Compactor: compactor, AttemptTimeout: cfg.AttemptTimeout,
		MaxToolIterations: cfg.MaxToolIterations, MaxToolRepeats: cfg.MaxToolRepeats, Retry: cfg.Retry, ToolPolicy: cfg.ToolPolicy}
	if cfg.BlockReplies {
		bc := blockchunk.DefaultConfig(0)
		rcfg.BlockReplies = &bc
	}
	if len(cfg.Hooks.Names) > 0 {
		if err := m.startHooks(ctx, &rcfg); err != nil {
			return err
		}
	}
	if m.Runner, err = runner.New(rcfg); err != nil {
		return err
	}
	m.Worker, err = lanes.NewWorker(m.JS, m.Streams, m.Lanes, lanes.HandlerFunc(m.observe), lanes.Config{
		ID: cfg.WorkerID, Concurrency: cfg.Concurrency, MaxPayload: cfg.MaxPayload, MaxInflightBytes: cfg.MaxInflightBytes,
		LaneTurnBudget: cfg.LaneTurnBudget, LaneTimeBudget: cfg.LaneTimeBudget, Linger: cfg.Linger, SetupConcurrency: cfg.SetupConcurrency,
		ShutdownGrace: cfg.ShutdownGrace, Logger: cfg.Logger, SessionTTL: cfg.SessionTTL, CheckSettings: m.checkSettings,
	})
	return err
}

// startHooks discovers the listed hooks and plugs them into the runner's
// configuration.
func (m *Member) startHooks(ctx context.Context, rcfg *runner.Config) error {
	hc := m.cfg.Hooks
	var err error
	if m.Hooks, err = hooks.NewRegistry(m.Conn, hooks.Config{Names: hc.Names, Timeout: hc.Timeout, ToolFailure: hc.ToolFailure, Logger: m.cfg.Logger}); err != nil {
		return fmt.Errorf("fleet: --hooks: %w", err)
	}
	// Know the hooks served now before the first turn; Run refreshes.
	if err := m.Hooks.Refresh(ctx); err != nil {
		m.log.Warn().Err(err).Msg("hooks: first discovery failed")
	}
	rcfg.Hooks = maskStartHooks(m.Hooks.StartHooks(), m.cfg.Redactor)
	rcfg.ToolHook, rcfg.EndHook = maskingToolHook{ToolHook: m.Hooks, red: m.cfg.Redactor}, m.Hooks
	return nil
}

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
	if m.Auth == nil {
		authCfg := authprofile.Config{Fleet: authprofile.FleetDefaults()}
		if m.Auth, err = authstore.Open(ctx, m.JS, authstore.Config{Replicas: cfg.Replicas, Auth: authCfg, Logger: cfg.Logger, MaxBytes: cfg.Limits.Auth}); err != nil {
			return err
		}
	}
	if m.Runs == nil {
		if m.Runs, err = kvstore.OpenRuns(ctx, m.JS, kvstore.RunsConfig{Replicas: cfg.Replicas, MaxAge: cfg.RunsRegistryTTL, MaxBytes: cfg.Limits.Runs}); err != nil {
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

// handle adapts a lane turn to the runner, registering the run in the
// active-run registry while it runs.
func (m *Member) handle(ctx context.Context, t *lanes.Turn) (*lanes.Outcome, error) {
	inbound, settings, from := runSettings(t)
	if ref := inbound.Model; ref != "" {
		if why := m.models.refuse(ref, from); why != "" {
			return refuse(t, events.KindInvalidInput, why), nil
		}
	}
	if why := m.clientToolClash(inbound.Tools); why != "" {
		return refuse(t, events.KindInvalidInput, why), nil
	}
	if settings.AuthProfileLocked {
		store, _ := fleetAuth{s: m.Auth, creds: m.creds}.Snapshot()
		if pe, ok := errors.AsType[*authprofile.PinError](m.pins.Check(store, settings.AuthProfile, time.Now())); ok {
			where := ""
			if t.Inbound.AuthProfile == "" {
				where = " (the session's setting)"
			}
			return refuse(t, events.KindInvalidInput, fmt.Sprintf("auth profile %q%s %s", pe.ID, where, pe.Reason)), nil
		}
	}
	reg := m.register(ctx, t)
	defer reg.clear(ctx)
	mk, steer := turnMasker(m.cfg.Redactor, t, inbound)
	ctx = withMasker(ctx, mk)
	in := runner.Input{SessionKey: t.SessionKey, SessionID: t.SessionID, RunID: t.RunID,
		Attempt: t.Attempt, Inbound: inbound, History: t.History, Steer: steer, Settings: settings, Approvals: t.State.Approvals}
	if steps := t.Steps(); steps != nil && !m.cfg.NoStepJournal {
		in.Steps = steps
	}
	out, err := m.Runner.Run(ctx, in, observeSink(ctx, phaseSink{Sink: t, reg: reg, ctx: ctx}))
	if err != nil {
		// The lane shows a failed attempt's error to the sender and in
		// the dead letter: masked like everything else the turn produces.
		err = maskError(mk, err)
		if out != nil {
			// A cut turn's progress, which an interrupt keeps, and what
			// its model calls cost.
			return &lanes.Outcome{Entries: out.Entries, Usage: runner.UsageMeta(out.Usage), AuthProfile: out.AuthProfile}, err
		}
		return nil, err
	}
	return &lanes.Outcome{Entries: out.Entries, Result: out.Result, Usage: runner.UsageMeta(out.Usage), AuthProfile: out.AuthProfile}, nil
}

// clientToolClash says why client tools take a worker tool's name ("" when
// none does): the built-in tools' (whether this worker offers them or not)
// and the remote tools'. The client's would silently have replaced the
// worker's: its calls went to the client. Names are compared ignoring
// case, as the tool policies do.
func (m *Member) clientToolClash(client []events.ClientTool) string {
	if len(client) == 0 {
		return ""
	}
	worker := tools.BuiltinNames()
	if m.Tools != nil {
		for _, t := range m.Tools.Tools() {
			worker = append(worker, t.Spec().Name)
		}
	}
	for _, c := range client {
		for _, w := range worker {
			if strings.EqualFold(c.Name, w) {
				return fmt.Sprintf("client tool %q has the name of a worker tool (%s): rename it", c.Name, strings.Join(worker, ", "))
			}
		}
	}
	return ""
}

// checkSettings refuses, at store time, a session setting of a model the
// member would not run (not allowed, or no key): every later turn of the
// session would have failed.
func (m *Member) checkSettings(rs *events.RunSettings) error {
	if rs.Model == "" {
		return nil
	}
	if why := m.models.refuse(rs.Model, ""); why != "" {
		return errors.New(why)
	}
	return nil
}

// runSettings resolves a turn's run settings: the message's own model,
// thinking level and auth profile win over the session's stored settings
// (t.Settings), which win over the worker's defaults (the runner's zero
// values). The returned inbound is the turn's message with the stored
// model and thinking level filled in (t.Inbound is left alone); from says
// " (the session's setting)" when the model came from the settings, for
// the refusal of a model the fleet does not allow. An auth profile the
// message or the settings name pins the run to it; otherwise the run
// starts on the profile that answered the session's last turn and may
// rotate away from it.
func runSettings(t *lanes.Turn) (inbound *events.Inbound, s runner.Settings, from string) {
	inbound = t.Inbound
	rs := t.Settings
	if rs == nil {
		rs = &events.RunSettings{}
	}
	if (inbound.Model == "" && rs.Model != "") || (inbound.Thinking == "" && rs.Thinking != "") {
		c := *inbound
		if c.Model == "" && rs.Model != "" {
			c.Model, from = rs.Model, " (the session's setting)"
		}
		if c.Thinking == "" {
			c.Thinking = rs.Thinking
		}
		inbound = &c
	}
	s = runner.Settings{MaxToolIterations: rs.MaxToolIterations, MaxToolRepeats: rs.MaxToolRepeats, HistoryLimit: rs.HistoryLimit}
	switch {
	case inbound.AuthProfile != "":
		s.AuthProfile, s.AuthProfileLocked = inbound.AuthProfile, true
	case rs.AuthProfile != "":
		s.AuthProfile, s.AuthProfileLocked = rs.AuthProfile, true
	default:
		s.AuthProfile = t.State.AuthProfile
	}
	if p := rs.Tools; p != nil {
		s.Tools = tools.Policy{Allow: p.Allow, Deny: p.Deny, Approve: p.Approve}
	}
	return inbound, s, from
}

// refuse ends a turn the runner never sees with an error event and an error
// result; nothing is added to the transcript.
func refuse(t *lanes.Turn, kind, msg string) *lanes.Outcome {
	t.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseError, Error: msg, EndedAt: time.Now().UnixMilli(), Attempt: t.Attempt})
	return &lanes.Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: msg, IsError: true}},
		Meta: events.Meta{Error: &events.RunError{Kind: kind, Message: msg}}}}
}

// registration is a run's entry in the active-run registry. The registry is
// informational, so its writes stay off the turn's path, and a run shorter
// than registerAfter never writes it: the entry is written once the run has
// gone on that long (or at once when it starts compacting), and removed
// after the turn is committed. Most turns end before anyone could list
// them, and each entry costs two writes.
type registration struct {
	done  chan struct{} // closed once the entry is written, or will not be
	ended chan struct{} // closed when the run ends: nothing to register
	soon  chan struct{} // closed to register now
	once  sync.Once
	h     *kvstore.RunHandle // nil when not written
	bg    *sync.WaitGroup    // the member's background writes
}

// registerAfter is how long a run goes on before it is listed as active
// (Config.registerAfter overrides it in tests).
const registerAfter = 100 * time.Millisecond

func (m *Member) register(ctx context.Context, t *lanes.Turn) *registration {
	r := &registration{done: make(chan struct{}), ended: make(chan struct{}), soon: make(chan struct{}), bg: &m.bg}
	info := kvstore.RunInfo{Session: t.SessionKey, RunID: t.RunID, Worker: m.Worker.ID(), Attempt: t.Attempt, StartedAt: time.Now().UnixMilli()}
	m.bg.Go(func() {
		defer close(r.done)
		after := registerAfter
		if m.cfg.registerAfter > 0 {
			after = m.cfg.registerAfter
		}
		wait := time.NewTimer(after)
		defer wait.Stop()
		select {
		case <-wait.C:
		case <-r.soon:
		case <-r.ended:
			return
		}
		tok, _ := events.KeyToken(t.SessionKey)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
		defer cancel()
		h, err := m.Runs.Register(rctx, tok, info)
		if err != nil {
			m.log.Warn().Err(err).Str("run_id", t.RunID).Msg("run registry")
			return
		}
		r.h = h
	})
	return r
}

// handle writes the entry now if it is not written yet, and returns it.
func (r *registration) handle() *kvstore.RunHandle {
	r.once.Do(func() { close(r.soon) })
	<-r.done
	return r.h
}

// clear removes the entry once it is written (in the background); a run
// that ended before its entry was due never writes one.
func (r *registration) clear(ctx context.Context) {
	close(r.ended)
	r.bg.Go(func() {
		<-r.done
		if h := r.h; h != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
			defer cancel()
			_ = h.Clear(cctx)
		}
	})
}

// phaseSink shows a run's compactions in the active-run registry.
type phaseSink struct {
	runner.Sink
	reg *registration
	ctx context.Context
}

func (p phaseSink) Emit(stream string, data events.EventData) {
	p.Sink.Emit(stream, data)
	if stream != events.StreamCompaction {
		return
	}
	h := p.reg.handle()
	if h == nil {
		return
	}
	phase := "running"
	if data.Phase == events.PhaseStart {
		phase = "compacting"
	}
	ctx, cancel := context.WithTimeout(p.ctx, stateTimeout)
	defer cancel()
	_ = h.SetPhase(ctx, phase)
}

// fleetAuth is runner.Auth over the fleet's auth bucket and the member's
// credentials.
type fleetAuth struct {
	s     *authstore.Store
	creds *authprofile.Store
}

func (a fleetAuth) Snapshot() (authprofile.Store, authprofile.Config) {
	return a.s.Snapshot(a.creds), a.s.Config().Auth
}

// Auth writes are bounded: a store in failover costs a run a cooldown
// record, never the run.
func (a fleetAuth) Apply(ctx context.Context, id string, ev authprofile.Event) error {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	_, err := a.s.Apply(ctx, id, ev)
	return err
}

func (a fleetAuth) MarkGood(ctx context.Context, prov, id string) error {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	return a.s.MarkGood(ctx, prov, id)
}

func (a fleetAuth) ClaimProbe(ctx context.Context, id, prov, model string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	return a.s.ClaimProbe(ctx, id, prov, model)
}

// stateTimeout bounds each write of fleet state a run makes besides its
// transcript (registry, auth profiles).
const stateTimeout = 5 * time.Second

// ClientURL returns the URL clients and other workers use, without
// credentials.
func (m *Member) ClientURL() string { return m.Conn.ConnectedUrlRedacted() }

// redactURL drops the credentials of a comma-separated NATS URL list for
// messages and logs.
func redactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		if pu, err := neturl.Parse(strings.TrimSpace(u)); err == nil && pu.User != nil {
			pu.User = neturl.User("[redacted]")
			parts[i] = pu.String()
		}
	}
	return strings.Join(parts, ",")
}

// Run processes lanes and serves the lane service (lanes/service) until ctx
// is done, then stops gracefully and closes the connection and the embedded
// server.
func (m *Member) Run(ctx context.Context) error {
	defer m.close()
	defer m.bg.Wait() // the registry writes of the last turns, before the close
	// The lane service answers clients' reads of their sessions while the
	// member runs lanes.
	svc, err := service.Serve(m.Conn, service.Config{Lanes: m.Lanes, Inbound: m.Streams.Inbound, Events: m.Streams.Events,
		Worker: m.Worker.ID(), Logger: m.log})
	if err != nil {
		return fmt.Errorf("fleet: lane service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	// The admin service answers operators (admin role) fleet-wide.
	adm, err := admin.Serve(m.Conn, admin.Config{JS: m.JS, Inbound: m.Streams.Inbound, Events: m.Streams.Events, Dead: m.Streams.Dead,
		Runs: m.Runs, Lanes: m.Lanes, Auth: m.authBook(), Worker: m.Worker.ID(), Logger: m.log})
	if err != nil {
		return fmt.Errorf("fleet: admin service: %w", err)
	}
	defer func() { _ = adm.Stop() }()
	if m.metricsSrv != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := m.metricsSrv.Serve(); err != nil {
				m.log.Error().Err(err).Msg("metrics listener stopped")
			}
		}()
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = m.metricsSrv.Close(ctx)
			<-done
		}()
	}
	if m.Tools != nil {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = m.Tools.Run(rctx) // refreshes the remote tools until cancelled
		}()
		defer func() { cancel(); <-done }()
	}
	if after := m.cfg.IdleRelease; after >= 0 {
		if after == 0 {
			after = IdleReleaseDefault
		}
		ictx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.releaseWhenIdle(ictx, after, m.Worker.Stats().Turns.Load)
		}()
		defer func() { cancel(); <-done }()
	}
	if m.Hooks != nil {
		hctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = m.Hooks.Run(hctx) // refreshes the hooks until cancelled
		}()
		defer func() { cancel(); <-done }()
	}
	return m.Worker.Run(ctx)
}

// MetricsAddr returns the address /metrics is served on, or "" when off.
func (m *Member) MetricsAddr() string {
	if m.metricsSrv == nil {
		return ""
	}
	return m.metricsSrv.Addr()
}

func (m *Member) close() {
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
	if m.Auth != nil {
		_ = m.Auth.Close()
	}
	if m.Conn != nil && !m.Conn.IsClosed() {
		_ = m.Conn.Drain()
		deadline := time.Now().Add(5 * time.Second)
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

func startEmbedded(cfg Config) (*server.Server, *server.Options, *embedded.StoreLock, error) {
	if cfg.DataDir == "" && cfg.ServerConfig == "" {
		return nil, nil, nil, errors.New("fleet: the embedded server needs a data directory (--data-dir)")
	}
	ec := embedded.Config{Name: "lanefleet", ConfigFile: cfg.ServerConfig, SyncAlways: &cfg.SyncAlways, InsecureListen: cfg.InsecureListen}
	if cfg.DataDir != "" {
		ec.DataDir = filepath.Join(cfg.DataDir, "jetstream")
	}
	switch {
	case cfg.Listen != "":
		h, p, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("fleet: --listen %q: %w", cfg.Listen, err)
		}
		port, err := strconv.Atoi(p)
		if err != nil || port < 0 || port > 65535 {
			return nil, nil, nil, fmt.Errorf("fleet: --listen %q: bad port", cfg.Listen)
		}
		if port == 0 {
			port = server.RANDOM_PORT
		}
		ec.Host, ec.Port = h, port
	case cfg.ServerConfig == "":
		ec.Host, ec.Port = "127.0.0.1", 4222
	}
	opts, err := embedded.Options(ec)
	switch {
	case errors.Is(err, embedded.ErrInsecureListen):
		return nil, nil, nil, fmt.Errorf("fleet: %w. Give the server users (--server-config nats.conf; `worker permissions` prints their permissions), listen on 127.0.0.1, or accept an open server with --insecure-listen", err)
	case errors.Is(err, embedded.ErrNoStoreDir):
		return nil, nil, nil, fmt.Errorf("fleet: the embedded server needs a data directory: --data-dir, or jetstream { store_dir } in %s", cfg.ServerConfig)
	case errors.Is(err, embedded.ErrConflict):
		return nil, nil, nil, fmt.Errorf("fleet: --server-config %s and --listen/--data-dir disagree: %w", cfg.ServerConfig, err)
	case err != nil:
		return nil, nil, nil, fmt.Errorf("fleet: %w", err)
	}
	if err := monitorOn(opts, cfg); err != nil {
		return nil, nil, nil, err
	}
	listen := ""
	if opts.Port > 0 {
		listen = "nats://" + net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
	}
	lock, err := embedded.LockStore(opts.StoreDir, holder(cfg.WorkerID, listen))
	var locked *embedded.LockedError
	switch {
	case errors.As(err, &locked):
		join := "--nats-url nats://<its address>"
		if strings.HasPrefix(locked.Holder.Listen, "nats://") {
			join = "--nats-url " + locked.Holder.Listen
		}
		return nil, nil, nil, fmt.Errorf("fleet: %w: two servers must never share a store. Stop that worker first, give this one its own --data-dir, or add it to that one's fleet with %s", err, join)
	case errors.Is(err, embedded.ErrStoreDir):
		return nil, nil, nil, fmt.Errorf("fleet: --data-dir: %w", err)
	case err != nil:
		return nil, nil, nil, fmt.Errorf("fleet: %w", err)
	}
	srv, err := embedded.StartOptions(opts)
	if err != nil {
		_ = lock.Close()
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, nil, fmt.Errorf("fleet: %w: another worker or NATS server listens there. Give this worker another --listen, or join that server with --nats-url", err)
		}
		return nil, nil, nil, fmt.Errorf("fleet: %w", err)
	}
	return srv, opts, lock, nil
}

// monitorOn sets the embedded server's monitoring listener (/varz, /jsz,
// /healthz, ...) to cfg.NATSMonitor. It has no authentication, so a
// non-loopback address needs InsecureListen, as the client port does.
func monitorOn(opts *server.Options, cfg Config) error {
	if cfg.NATSMonitor == "" {
		return nil
	}
	if opts.HTTPPort != 0 {
		return fmt.Errorf("fleet: --nats-monitor and the monitoring port of --server-config %s: configure it in one place", cfg.ServerConfig)
	}
	h, p, err := net.SplitHostPort(cfg.NATSMonitor)
	if err != nil {
		return fmt.Errorf("fleet: --nats-monitor %q: %w", cfg.NATSMonitor, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return fmt.Errorf("fleet: --nats-monitor %q: bad port", cfg.NATSMonitor)
	}
	if !embedded.IsLoopback(h) && !cfg.InsecureListen {
		return fmt.Errorf("fleet: --nats-monitor %s: the monitoring endpoints have no authentication and show every connection and stream; listen on 127.0.0.1 or accept that with --insecure-listen", cfg.NATSMonitor)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts.HTTPHost, opts.HTTPPort = h, port
	return nil
}

// NATSMonitorAddr returns the embedded server's monitoring address, or ""
// when it serves none.
func (m *Member) NATSMonitorAddr() string {
	if m.Server == nil {
		return ""
	}
	if a := m.Server.MonitorAddr(); a != nil {
		return a.String()
	}
	return ""
}

// pinServerCert makes the connection to the embedded server trust exactly
// the certificate that server presents: the member runs it, so no CA is
// needed to know it is talking to itself.
func pinServerCert(opts *server.Options) (nats.Option, error) {
	if len(opts.TLSConfig.Certificates) == 0 || len(opts.TLSConfig.Certificates[0].Certificate) == 0 {
		return nil, errors.New("fleet: the embedded server's TLS certificate is not a file: give its CA with --tls-ca")
	}
	want := opts.TLSConfig.Certificates[0].Certificate[0]
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is the pin below, not a CA and a host name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, want) {
				return errors.New("fleet: the server is not the embedded server (certificate differs)")
			}
			return nil
		},
	}
	return nats.Secure(tc), nil // a client certificate (ClientCert) still applies
}

func connectOptions(cfg Config) ([]nats.Option, error) {
	name := "lanefleet-worker"
	if cfg.WorkerID != "" {
		name += "-" + cfg.WorkerID
	}
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				cfg.Logger.Warn().Err(err).Msg("disconnected from NATS")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			cfg.Logger.Info().Str("url", redactURL(nc.ConnectedUrl())).Msg("reconnected to NATS")
		}),
		// Permission violations and slow consumers arrive asynchronously:
		// without this they would be silent.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := cfg.Logger.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("NATS error")
		}),
	}
	if cfg.User != "" || cfg.Password != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	inbox := cfg.InboxPrefix
	if inbox == "" && cfg.User != "" {
		inbox = permission.InboxPrefix(cfg.User)
	}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("fleet: nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	return opts, nil
}

// Resolver maps "provider/model-id" to a model and the provider that serves
// it: scripted models from the built-in scripted provider, everything else
// through the provider registry (catalog, API keys and base URLs from the
// member's environment).
type Resolver struct {
	env      func(string) string
	scripted *scripted.Provider
	served   []provider.Model
	registry *registry.Registry
	log      zerolog.Logger
}

// ResolverConfig configures a Resolver.
type ResolverConfig struct {
	Env      func(string) string
	Scripted *scripted.Provider // serves the scripted test models; nil turns them off
	Catalog  *catalog.Catalog   // nil = catalog.Builtin()
	// Served are the --openai-compatible server's models, in its order
	// (also in Catalog).
	Served []provider.Model
	Keys   map[string]provider.Secret // API keys by provider besides Env's
	Logger zerolog.Logger
}

// NewResolver returns the member's model resolver.
func NewResolver(cfg ResolverConfig) *Resolver {
	return &Resolver{env: cfg.Env, scripted: cfg.Scripted, served: cfg.Served, log: cfg.Logger,
		registry: registry.New(registry.Config{Env: cfg.Env, Catalog: cfg.Catalog, Keys: cfg.Keys})}
}

// defaultModels is the default model per provider key, in the order keys are
// looked for.
var defaultModels = []struct{ env, ref string }{
	{"ANTHROPIC_API_KEY", "anthropic/claude-sonnet-4-6"},
	{"OPENAI_API_KEY", "openai/gpt-5-mini"},
	{"GEMINI_API_KEY", "google/gemini-2.5-flash"},
	{"GOOGLE_API_KEY", "google/gemini-2.5-flash"},
	{"OPENROUTER_API_KEY", "openrouter/anthropic/claude-sonnet-4.5"},
	{"MISTRAL_API_KEY", "mistral/devstral-medium-latest"},
}

// DefaultModel is the --openai-compatible server's first chat model, else
// the model of the first provider with an API key in the environment, else
// scripted/echo when the scripted models are on, else "".
func (r *Resolver) DefaultModel() string {
	if m, ok := local.DefaultModel(r.served); ok {
		return m.Ref()
	}
	for _, d := range defaultModels {
		if r.env(d.env) != "" {
			return d.ref
		}
	}
	if r.scripted != nil {
		return "scripted/echo"
	}
	return ""
}

// check reports whether ref names a model the member can serve at all: a
// known provider and wire API with an adapter, a context window the run
// guard accepts, and for the --openai-compatible server's provider a model
// it lists (keys are not checked: they may come from the auth profiles).
func (r *Resolver) check(ref string) error {
	p, id, ok := strings.Cut(ref, "/")
	switch {
	case !ok:
		return fmt.Errorf("%q is not provider/model-id", ref)
	case p == scripted.ProviderName && r.scripted == nil:
		return fmt.Errorf("%q: the scripted test models are off (start the worker with --scripted)", ref)
	case p == scripted.ProviderName:
		return nil
	case p == local.ProviderName && len(r.served) > 0 && !servedLists(r.served, id):
		return fmt.Errorf("%q: the --openai-compatible server does not list %q; it lists %s", ref, id, servedIDs(r.served))
	}
	res, _, err := r.registry.ProviderFor(ref)
	if err != nil {
		return err
	}
	if err := guard.ResolveWindow(p, id, float64(res.Model.ContextWindow), guard.WindowConfig{}).Err(); err != nil {
		return fmt.Errorf("%q: %w (raise the model's contextWindow, and the server's context size, to at least that)", ref, err)
	}
	return nil
}

// runnable reports whether the member can run ref beyond check: a
// scripted model the scripted provider plays, a provider with a key (in
// the environment, the auth profiles or Config's keys) unless it needs
// none.
func (r *Resolver) runnable(ref string, creds *authprofile.Store) error {
	p, id, _ := strings.Cut(ref, "/")
	if p == scripted.ProviderName {
		if r.scripted == nil || !r.scripted.Serves(id) {
			return fmt.Errorf("%q: no such scripted model (echo, script, or a configured script)", ref)
		}
		return nil
	}
	res, err := r.registry.Resolve(ref)
	if err != nil {
		return err
	}
	if !registry.NeedsKey(res.Model) || r.hasKey(p, creds) {
		return nil
	}
	hint := "add an auth profile for " + p + " to --auth-profiles"
	if cp, ok := catalog.Provider(p); ok && len(cp.KeyEnv) > 0 {
		hint = "set " + strings.Join(cp.KeyEnv, " or ") + ", or " + hint
	}
	return fmt.Errorf("%q: no API key for provider %q (%s)", ref, p, hint)
}

// hasKey reports whether the member holds a key for provider p.
func (r *Resolver) hasKey(p string, creds *authprofile.Store) bool {
	if _, ok := r.registry.APIKey(p); ok {
		return true
	}
	if creds != nil {
		for _, pr := range creds.Profiles {
			if pr.Provider == p {
				return true
			}
		}
	}
	return false
}

// canonical returns ref as the model's calls name it (provider/id of the
// resolved model), or ref itself when it does not resolve.
func (r *Resolver) canonical(ref string) string {
	if p, _, _ := strings.Cut(ref, "/"); p == scripted.ProviderName {
		return ref
	}
	res, err := r.registry.Resolve(ref)
	if err != nil {
		return ref
	}
	return res.Model.Provider + "/" + res.Model.ID
}

// usable is check and runnable: the member can serve ref and call it.
func (r *Resolver) usable(ref string, creds *authprofile.Store) error {
	if err := r.check(ref); err != nil {
		return err
	}
	return r.runnable(ref, creds)
}

// policy checks that the default model and the fallbacks can run (a
// worker whose default model cannot logged ready while every turn
// failed), and returns the member's model policy: cfg.AllowModels, or by
// default the default model, the fallbacks, the catalog's models (with
// the models file) it has a key for and, when on, the scripted models.
func (r *Resolver) policy(cfg Config, defaultModel string, creds *authprofile.Store) (modelPolicy, error) {
	if err := r.usable(defaultModel, creds); err != nil {
		return modelPolicy{}, fmt.Errorf("fleet: default model: %w", err)
	}
	for _, f := range cfg.Fallbacks {
		if err := r.usable(f, creds); err != nil {
			return modelPolicy{}, fmt.Errorf("fleet: fallback model: %w", err)
		}
	}
	patterns := cfg.AllowModels
	if len(patterns) == 0 {
		patterns = append([]string{defaultModel}, cfg.Fallbacks...)
		for _, m := range r.registry.Catalog().Models() {
			if r.runnable(m.Ref(), creds) == nil {
				patterns = append(patterns, m.Ref())
			}
		}
		if r.scripted != nil {
			patterns = append(patterns, scripted.ProviderName+"/*")
		}
	}
	a, err := catalog.NewAllowlist(patterns...)
	if err != nil {
		return modelPolicy{}, fmt.Errorf("fleet: --allow-models: %w", err)
	}
	// What a refusal lists: the allowed patterns of providers it can call.
	var offered []string
	for _, p := range a.Patterns() {
		if prov, _, _ := strings.Cut(p, "/"); r.mayCall(prov, creds) {
			offered = append(offered, p)
		}
	}
	o, err := catalog.NewAllowlist(offered...)
	if err != nil {
		return modelPolicy{}, fmt.Errorf("fleet: --allow-models: %w", err)
	}
	return modelPolicy{allowed: a, offered: o, usable: func(ref string) error { return r.usable(ref, creds) }}, nil
}

// mayCall reports whether some model of provider p (a name or a glob) may
// run: the scripted models when on, a provider with a key, one that needs
// none, or one the catalog does not know (a models file's or the
// --openai-compatible server's, which may need none).
func (r *Resolver) mayCall(p string, creds *authprofile.Store) bool {
	if p == scripted.ProviderName {
		return r.scripted != nil
	}
	cp, known := catalog.Provider(p)
	return !known || cp.NoKey || r.hasKey(p, creds)
}

// modelPolicy decides whether the member runs a model a message or a
// session's settings name.
type modelPolicy struct {
	allowed catalog.Allowlist      // --allow-models, or the default list
	offered catalog.Allowlist      // the allowed ones it can call: what a refusal lists
	usable  func(ref string) error // the member can serve and call ref
}

// refuse returns why the member does not run model ref ("" when it
// does); from says where ref came from (" (the session's setting)").
func (p modelPolicy) refuse(ref, from string) string {
	if !p.allowed.Allows(ref) {
		return fmt.Sprintf("model %q%s is not allowed on this fleet; allowed: %s", ref, from, p.offered.Describe(12))
	}
	if p.usable != nil {
		if err := p.usable(ref); err != nil {
			why := strings.TrimPrefix(err.Error(), strconv.Quote(ref)+": ")
			return fmt.Sprintf("model %q%s cannot run on this fleet: %s; it runs: %s", ref, from, why, p.offered.Describe(12))
		}
	}
	return ""
}

// Resolve implements runner.Resolver.
func (r *Resolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	p, id, ok := strings.Cut(ref, "/")
	if !ok || p == "" || id == "" {
		return provider.Model{}, nil, fmt.Errorf("%q is not provider/model-id", ref)
	}
	if p == scripted.ProviderName {
		if r.scripted == nil {
			return provider.Model{ID: id, Provider: p}, nil, errors.New("the scripted test models are off on this worker")
		}
		return scripted.Model(id), r.scripted, nil
	}
	res, prov, err := r.registry.ProviderFor(ref)
	if err != nil {
		return provider.Model{ID: id, Provider: p}, nil, err
	}
	if res.Warning != "" {
		r.log.Warn().Str("model", ref).Msg(res.Warning)
	}
	return res.Model, prov, nil
}
