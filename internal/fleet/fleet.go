// Package fleet assembles one fleet member: a NATS connection (or an embedded
// JetStream server when no URL is given), the fleet's streams and buckets, the
// runner with its providers, and a lanes worker driving it. cmd/worker is its
// flag-parsing front; integration tests and the benchmark start members
// in-process through it.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/blockchunk"
	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/lanes/service"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/registry"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// Config configures a member.
type Config struct {
	// Joining an existing deployment.
	NATSURL   string // comma-separated server URLs; empty = start an embedded server
	CredsFile string // NATS credentials file
	NKeyFile  string // NKey seed file
	TLSCert   string // client certificate
	TLSKey    string // client key
	TLSCA     string // CA bundle for the server certificate

	// The embedded server (NATSURL empty).
	DataDir    string // JetStream store; required for the embedded server
	Listen     string // host:port for clients and other workers; default 127.0.0.1:4222
	SyncAlways bool   // fsync every write before acknowledging (default in cmd/worker)

	// The fleet.
	WorkerID      string
	Replicas      int           // stream and bucket replicas (3 on a cluster)
	Concurrency   int           // lanes owned at once by this worker
	AckWait       time.Duration // dispatch AckWait
	LeaseTTL      time.Duration // lane lease TTL
	ShutdownGrace time.Duration
	MaxPayload    int

	// The runner.
	DefaultModel  string        // "provider/model-id"; default: by the API keys present, else scripted/echo
	ModelsFile    string        // user models file adding to or overriding the built-in catalog
	ScriptedDelay time.Duration // pause before each scripted/echo delta
	Scripts       map[string]scripted.Script
	Fallbacks     []string // model fallback chain after the requested model
	// AuthProfiles is an auth-profiles.json file of API keys and tokens;
	// keys in the environment (ANTHROPIC_API_KEY, ...) are profiles too.
	AuthProfiles   string
	AttemptTimeout time.Duration // one attempt of a run; default 10 minutes
	// WorkspaceRoot holds each session's workspace directory for the
	// built-in tools; default <DataDir>/workspaces, else a temp directory.
	WorkspaceRoot  string
	NoBuiltinTools bool   // no read/write/edit/exec
	NoRemoteTools  bool   // do not discover tools served over NATS
	NoCompaction   bool   // no threshold compaction (overflow recovery still compacts)
	NoBlockReplies bool   // no block reply events
	SystemPrompt   string // base of every run's system prompt (workspace, skills and context files are added)
	SkillsDir      string // directory of skills (<name>/SKILL.md) every session sees, besides <workspace>/skills
	// Skills configures skills by name (OpenClaw's skills.entries):
	// enabled, and the environment their commands get (exec).
	Skills          agentprompt.SkillConfigs
	RunsRegistryTTL time.Duration // how long a dead run's registry entry lives; default 1 hour

	Logger zerolog.Logger
	// Env reads configuration such as API keys; default os.Getenv. Runs never
	// change the process environment.
	Env func(string) string
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
	log     zerolog.Logger

	defaultModel string
}

// DefaultModel returns the model turns use when the message names none.
func (m *Member) DefaultModel() string { return m.defaultModel }

// Start connects (or starts the embedded server), prepares the fleet's
// streams and buckets, and builds the worker. Call Run to process lanes.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if cfg.Env == nil {
		cfg.Env = os.Getenv
	}
	m := &Member{cfg: cfg, log: cfg.Logger}
	url := cfg.NATSURL
	if url == "" {
		srv, err := startEmbedded(cfg)
		if err != nil {
			return nil, err
		}
		m.Server = srv
		url = srv.ClientURL()
		m.log.Info().Str("url", url).Str("data_dir", cfg.DataDir).Bool("sync_always", cfg.SyncAlways).Msg("embedded NATS server started")
	}
	opts, err := connectOptions(cfg)
	if err != nil {
		m.close()
		return nil, err
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		m.close()
		return nil, fmt.Errorf("fleet: connect to NATS at %s: %w", url, err)
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
	if err := m.build(ctx); err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

func (m *Member) build(ctx context.Context) error {
	cfg := m.cfg
	if err := cfg.Skills.Validate(); err != nil {
		return fmt.Errorf("fleet: skills configuration: %w", err)
	}
	res, err := NewResolver(cfg.Env, scripted.New(scripted.Config{Delay: cfg.ScriptedDelay, Scripts: cfg.Scripts}), cfg.ModelsFile, cfg.Logger)
	if err != nil {
		return err
	}
	creds, err := authstore.LoadCredentials(cfg.AuthProfiles, cfg.Env)
	if err != nil {
		return err
	}
	// A cluster may still be electing leaders right after start: retry
	// what is not open yet.
	for attempt := 0; ; attempt++ {
		err = m.openState(ctx)
		if err == nil || attempt >= 10 || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("fleet: prepare streams and buckets: %w", err)
	}
	if !cfg.NoRemoteTools {
		if m.Tools, err = remote.NewRegistry(m.Conn, remote.DiscoverConfig{Logger: cfg.Logger}); err != nil {
			return err
		}
		// Know the tools served now before the first turn; Run refreshes.
		if err := m.Tools.Refresh(ctx); err != nil {
			m.log.Warn().Err(err).Msg("remote tools: first discovery failed")
		}
	}
	ts, err := newToolSource(cfg, m.Tools)
	if err != nil {
		return err
	}
	m.defaultModel = cfg.DefaultModel
	if m.defaultModel == "" {
		m.defaultModel = res.DefaultModel()
	}
	compactor := runner.PiCompactor{Settings: compaction.DefaultSettings()}
	compactor.Settings.Enabled = !cfg.NoCompaction
	rcfg := runner.Config{DefaultModel: m.defaultModel, Fallbacks: cfg.Fallbacks, Resolver: res, Logger: cfg.Logger,
		Auth: fleetAuth{s: m.Auth, creds: creds}, Tools: ts, Compactor: compactor, AttemptTimeout: cfg.AttemptTimeout}
	if !cfg.NoBlockReplies {
		bc := blockchunk.DefaultConfig(0)
		rcfg.BlockReplies = &bc
	}
	if m.Runner, err = runner.New(rcfg); err != nil {
		return err
	}
	m.Worker, err = lanes.NewWorker(m.JS, m.Streams, m.Lanes, lanes.HandlerFunc(m.handle), lanes.Config{
		ID: cfg.WorkerID, Concurrency: cfg.Concurrency, MaxPayload: cfg.MaxPayload,
		ShutdownGrace: cfg.ShutdownGrace, Logger: cfg.Logger,
	})
	return err
}

// openState creates or binds the fleet's streams and buckets, skipping
// those already open.
func (m *Member) openState(ctx context.Context) error {
	cfg := m.cfg
	var err error
	if m.Streams == nil {
		if m.Streams, err = lanes.EnsureStreams(ctx, m.JS, lanes.StreamConfig{Replicas: cfg.Replicas, AckWait: cfg.AckWait}); err != nil {
			return err
		}
	}
	if m.Lanes == nil {
		if m.Lanes, err = kvstore.Open(ctx, m.JS, kvstore.Config{Replicas: cfg.Replicas, LeaseTTL: cfg.LeaseTTL}); err != nil {
			return err
		}
	}
	if m.Auth == nil {
		authCfg := authprofile.Config{Fleet: authprofile.FleetDefaults()}
		if m.Auth, err = authstore.Open(ctx, m.JS, authstore.Config{Replicas: cfg.Replicas, Auth: authCfg, Logger: cfg.Logger}); err != nil {
			return err
		}
	}
	if m.Runs == nil {
		if m.Runs, err = kvstore.OpenRuns(ctx, m.JS, "", cfg.Replicas, cfg.RunsRegistryTTL); err != nil {
			return err
		}
	}
	return nil
}

// handle adapts a lane turn to the runner, registering the run in the
// active-run registry while it runs.
func (m *Member) handle(ctx context.Context, t *lanes.Turn) (*lanes.Outcome, error) {
	reg := m.register(ctx, t)
	defer reg.clear(ctx)
	out, err := m.Runner.Run(ctx, runner.Input{SessionKey: t.SessionKey, SessionID: t.SessionID, RunID: t.RunID,
		Attempt: t.Attempt, Inbound: t.Inbound, History: t.History, Steer: t.Steer}, phaseSink{Sink: t, reg: reg, ctx: ctx})
	if err != nil {
		return nil, err
	}
	return &lanes.Outcome{Entries: out.Entries, Result: out.Result}, nil
}

// registration is a run's entry in the active-run registry. The registry is
// informational, so its writes stay off the turn's path: the entry is
// written while the model runs and removed after the turn is committed.
type registration struct {
	done chan struct{}
	h    *kvstore.RunHandle // nil when the write failed
}

func (m *Member) register(ctx context.Context, t *lanes.Turn) *registration {
	r := &registration{done: make(chan struct{})}
	info := kvstore.RunInfo{Session: t.SessionKey, RunID: t.RunID, Worker: m.Worker.ID(), Attempt: t.Attempt, StartedAt: time.Now().UnixMilli()}
	go func() {
		defer close(r.done)
		tok, _ := events.KeyToken(t.SessionKey)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
		defer cancel()
		h, err := m.Runs.Register(rctx, tok, info)
		if err != nil {
			m.log.Warn().Err(err).Str("run_id", t.RunID).Msg("run registry")
			return
		}
		r.h = h
	}()
	return r
}

// handle waits for the entry's write.
func (r *registration) handle() *kvstore.RunHandle {
	<-r.done
	return r.h
}

// clear removes the entry once it is written (in the background).
func (r *registration) clear(ctx context.Context) {
	go func() {
		if h := r.handle(); h != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
			defer cancel()
			_ = h.Clear(cctx)
		}
	}()
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
	if data.Phase == "start" {
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

// ClientURL returns the URL clients and other workers use.
func (m *Member) ClientURL() string { return m.Conn.ConnectedUrl() }

// Run processes lanes and serves the lane service (lanes/service) until ctx
// is done, then stops gracefully and closes the connection and the embedded
// server.
func (m *Member) Run(ctx context.Context) error {
	defer m.close()
	// The lane service answers clients' reads of their sessions while the
	// member runs lanes.
	svc, err := service.Serve(m.Conn, service.Config{Lanes: m.Lanes, Inbound: m.Streams.Inbound, Events: m.Streams.Events,
		Worker: m.Worker.ID(), Logger: m.log})
	if err != nil {
		return fmt.Errorf("fleet: lane service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	if m.Tools != nil {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = m.Tools.Run(rctx) // refreshes the remote tools until cancelled
		}()
		defer func() { cancel(); <-done }()
	}
	return m.Worker.Run(ctx)
}

func (m *Member) close() {
	if m.Auth != nil {
		_ = m.Auth.Close()
	}
	if m.Conn != nil {
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
}

func startEmbedded(cfg Config) (*server.Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("fleet: the embedded server needs a data directory (--data-dir)")
	}
	host, port := "127.0.0.1", 4222
	if cfg.Listen != "" {
		h, p, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("fleet: --listen %q: %w", cfg.Listen, err)
		}
		if h != "" {
			host = h
		}
		if port, err = strconv.Atoi(p); err != nil || port < 0 {
			return nil, fmt.Errorf("fleet: --listen %q: bad port", cfg.Listen)
		}
	}
	sync := cfg.SyncAlways
	return embedded.Start(embedded.Config{Name: "lanefleet", Host: host, Port: port,
		DataDir: filepath.Join(cfg.DataDir, "jetstream"), SyncAlways: &sync})
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
			cfg.Logger.Info().Str("url", nc.ConnectedUrl()).Msg("reconnected to NATS")
		}),
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
	registry *registry.Registry
	log      zerolog.Logger
}

// NewResolver returns the member's model resolver. modelsFile, when set, adds
// or overrides catalog entries.
func NewResolver(env func(string) string, s *scripted.Provider, modelsFile string, log zerolog.Logger) (*Resolver, error) {
	cat := catalog.Builtin()
	if modelsFile != "" {
		var err error
		if cat, err = cat.LoadFile(modelsFile); err != nil {
			return nil, fmt.Errorf("fleet: models file: %w", err)
		}
	}
	return &Resolver{env: env, scripted: s, log: log, registry: registry.New(registry.Config{Env: env, Catalog: cat})}, nil
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

// DefaultModel is the model of the first provider with an API key in the
// environment, else scripted/echo.
func (r *Resolver) DefaultModel() string {
	for _, d := range defaultModels {
		if r.env(d.env) != "" {
			return d.ref
		}
	}
	return "scripted/echo"
}

// Resolve implements runner.Resolver.
func (r *Resolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	p, id, ok := strings.Cut(ref, "/")
	if !ok || p == "" || id == "" {
		return provider.Model{}, nil, fmt.Errorf("%q is not provider/model-id", ref)
	}
	if p == scripted.ProviderName {
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
