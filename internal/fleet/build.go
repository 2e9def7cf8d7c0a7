package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/blockchunk"
	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/local"
	"github.com/lanefleet/lanefleet/provider/registry"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/sessionindex"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
	"github.com/lanefleet/lanefleet/tools/sessions"
)

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
