// Package runner runs one agent turn: it builds the model context from the
// session's history and the inbound message, calls the provider, executes the
// tool loop, streams events to a sink and returns the entries to append and
// the run's result. It declares the interfaces it needs and imports no NATS:
// cmd/worker plugs it into the lanes.
//
// Where things are:
//
//	runner.go        Runner, Config, the interfaces it declares, Run (a turn from input to output)
//	run.go           the run type: one turn in progress, its transcript and context
//	loop.go          the model loop: attempts, failover, rotation, fallbacks' decisions
//	attempt.go       one attempt: the call loop alone
//	retry.go         same-key retries and their waits
//	toolcalls.go     running tool calls, approvals and client tools' results
//	compact.go       compaction and overflow truncation
//	usage.go         usage and cost accounting
//	admit.go         the Admission asked before each model call (budgets)
//	result.go        the run's result
//	journal.go       the step journal (replaying a re-run's steps)
//	subscribe.go     the event stream of a call (deltas, blocks)
//	contextcache.go  the sessions' converted contexts, shared between runs
//	auth.go          auth profile state writes
package runner

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/blockchunk"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/fallback"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/tools"
)

// Sink receives a run's content events: deltas, tool and compaction
// events, and the lifecycle retrying, retry, resumed, budget_warning and
// waiting notices. The events that start and end a run are the lane's, which
// makes the end or error event from the Output. lanes.Turn implements it.
type Sink interface {
	Emit(stream string, data events.EventData)
}

// Resolver finds the model and provider for a "provider/model-id" reference.
type Resolver interface {
	Resolve(ref string) (provider.Model, provider.Provider, error)
}

// Input is one turn.
type Input struct {
	SessionKey string
	SessionID  string
	RunID      string
	Attempt    int
	Inbound    *events.Inbound
	History    []message.Entry
	// HistoryAppendOnly promises that History's array is never written
	// again below len(History): a later turn's history over the same
	// array (the same first entry in memory) repeats these entries
	// unchanged and may only add entries after them, and any other
	// change to the session comes in another array (a lane's transcript
	// grows so). The runner then checks only the entries a later history
	// adds to the one its cached context was built from, not the whole
	// history (see contextCache).
	HistoryAppendOnly bool
	// Steer, when set, returns the steer-mode messages that arrived since
	// the last call; the runner polls it at every model-call boundary.
	Steer func(ctx context.Context) []*events.Inbound
	// Settings are the run's own settings (from the message, or stored
	// with the session); the zero value takes the worker's.
	Settings Settings
	// Steps, when set, journals the run's completed steps: a re-run of
	// the turn replays the model replies and tool results recorded there
	// instead of making those calls again, then goes on live.
	Steps StepStore
	// Lineage are the sessions this one is a sub-agent of, nearest first
	// (subagent.Lineage of its state; nil for a session nobody spawned):
	// the Admission charges its calls to their budgets too.
	Lineage []string
	// Approvals are the calls the session's last turn left waiting for
	// approval, as the fleet stored them (events.SessionState): a tool
	// result may approve or refuse only these. A call the history alone
	// shows waiting (an imported or crafted transcript) is never run.
	Approvals []events.ApprovalCall
}

// Settings are one run's settings. Each zero field means the worker's
// Config; none can exceed what the worker allows.
type Settings struct {
	// MaxToolIterations bounds the model calls of the turn's tool loop;
	// capped by Config.MaxToolIterations.
	MaxToolIterations int
	// MaxToolRepeats stops the turn once the same tool call (same tool,
	// same arguments) failed with the same error this many times; capped
	// by Config.MaxToolRepeats.
	MaxToolRepeats int
	// HistoryLimit keeps only the last n user turns in requests; 0 =
	// Config.HistoryLimit.
	HistoryLimit int
	// AuthProfile is the auth profile the run starts with when it is
	// usable (the session's sticky profile). With AuthProfileLocked the
	// user pinned it: it is the only one used, even while cooling, and a
	// profile that is not configured for the model's provider fails the
	// run (runtime spec §3.1 step 4).
	AuthProfile       string
	AuthProfileLocked bool
	// Tools is the session's tool policy, applied within the worker's
	// (Config.ToolPolicy): it can refuse more tools and ask approval for
	// more, never allow what the worker refuses.
	Tools tools.Policy
	// AgentTools are the run's agent's tool policies (its profile, its
	// lists), applied like Tools: within the worker's, never widening it.
	AgentTools []tools.Policy
	// Model is the run's default model (its agent's), in place of
	// Config.DefaultModel: the model a message that names none runs on,
	// and the primary of the fallback chain. "" = Config.DefaultModel.
	Model string
	// Fallbacks replace Config.Fallbacks when not empty (the run's
	// agent's fallback models).
	Fallbacks []string
}

// defaultModel is the run's default model: Settings.Model, else the
// worker's.
func (r *Runner) defaultModel(s Settings) string {
	if s.Model != "" {
		return s.Model
	}
	return r.cfg.DefaultModel
}

// fallbacks are the run's fallback models: Settings.Fallbacks, else the
// worker's.
func (r *Runner) fallbacks(s Settings) []string {
	if len(s.Fallbacks) > 0 {
		return s.Fallbacks
	}
	return r.cfg.Fallbacks
}

// Output is a finished turn: the entries to append and the result.
type Output struct {
	Entries []message.Entry
	Result  *events.Result
	// Usage sums the usage of every model call the turn made, cost
	// included: what a session's running total adds.
	Usage message.Usage
	// AuthProfile is the auth profile that answered the run ("" = none,
	// or the provider's own key): the session's sticky profile for its
	// next run (Settings.AuthProfile).
	AuthProfile string
	// EndText is the text the run's lifecycle end event carries (a
	// compaction's notice); "" for a model's reply, which the result
	// carries (lanes.Outcome.EndText).
	EndText string
}

// ToolSource gives a run its tools (built-in tools in the session's
// workspace, remote tools, ...). Client tools come with the message.
type ToolSource interface {
	Tools(ctx context.Context, in Input) (tools.Set, error)
}

// PromptSource builds a run's system prompt (workspace, skills, context
// files) given the tools offered to the model: set is what the ToolSource
// returned for this run (nil without one), specs every tool offered,
// client tools included.
type PromptSource interface {
	SystemPrompt(ctx context.Context, in Input, set tools.Set, specs []provider.Tool) string
}

// ToolHook sees each call of a worker tool before it runs (OpenClaw's
// before_tool_call plugin hook). Client tools run on the client and are
// not shown to it.
type ToolHook interface {
	// BeforeToolCall decides on one call. It must return when ctx is done.
	// An error only warns: the call runs with its own arguments (as in the
	// reference); a hook that must fail closed returns a Block instead.
	BeforeToolCall(ctx context.Context, in ToolHookInput) (ToolHookResult, error)
}

// ToolHookInput is the call a ToolHook decides on.
type ToolHookInput struct {
	SessionKey, RunID string
	ToolCallID        string
	ToolName          string
	// Args are the arguments the model gave; read-only.
	Args map[string]any
}

// ToolHookResult is a ToolHook's decision. The zero value lets the call
// run as the model made it.
type ToolHookResult struct {
	// Block refuses the call: the model gets Reason (or a text saying a
	// hook blocked the call) as the tool's error result.
	Block  bool
	Reason string
	// Args, when not nil, replace the call's arguments. The transcript
	// keeps the model's call as it was made.
	Args map[string]any
}

// EndHook observes every finished run (OpenClaw's agent_end plugin hook).
// AgentEnd is called on the run's goroutine before Run returns and must
// not block: send and forget. A run that is redone (its worker died before
// the turn was committed) ends again with the same RunID.
type EndHook interface {
	AgentEnd(in EndHookInput)
}

// EndHookInput is a finished run.
type EndHookInput struct {
	SessionKey, RunID string
	Attempt           int
	Result            *events.Result
}

// CompactRequest is one compaction.
type CompactRequest struct {
	Model    provider.Model
	Provider provider.Provider
	APIKey   provider.Secret
	// Entries is the session so far (history and this turn).
	Entries []message.Entry
	// Trigger is "overflow", "threshold" or "manual" (/compact).
	Trigger string
	// Focus is appended to the summary prompt (/compact <focus>).
	Focus string
}

// Compactor summarises older history into a compaction entry (pi's
// compaction, runtime spec §20).
type Compactor interface {
	// Compact returns the compaction entry to append after req.Entries.
	Compact(ctx context.Context, req CompactRequest) (message.Entry, error)
	// Due reports whether a context (the messages of the next request) has
	// grown past the compaction threshold of a contextWindow-token model.
	Due(msgs []message.Message, contextWindow int) bool
}

// Config configures a Runner.
type Config struct {
	DefaultModel string // "provider/model-id"; default "scripted/echo"
	// Fallbacks are the models tried, in order, when the requested one
	// fails with a failover error ("provider/model-id" or an alias).
	Fallbacks []string
	// Aliases maps model aliases to "provider/model-id".
	Aliases      map[string]string
	SystemPrompt string
	Resolver     Resolver
	// Auth holds the auth profiles; nil = every provider uses its
	// environment key.
	Auth Auth
	// Tools gives each run its tools; when it is also a PromptSource it
	// builds each run's system prompt too. nil = no tools but the client's.
	Tools ToolSource
	// ToolPolicy is the worker's tool policy: the tools it refuses are not
	// offered, and every call of a tool it marks for approval ends the run
	// with the call pending until the client answers "approve" (a session's
	// Settings.Tools narrows it further). Client tools run on the client
	// and are not subject to it.
	ToolPolicy tools.Policy
	// Hooks run before each run's prompt: they may prepend context to it
	// or replace the system prompt; a failing hook only warns.
	Hooks []agentprompt.Hook
	// ToolHook, when set, sees every call of a worker tool before it runs
	// and may block it or rewrite its arguments; nil = none.
	ToolHook ToolHook
	// EndHook, when set, is told every run's result once the run ended;
	// nil = none.
	EndHook   EndHook
	Compactor Compactor // nil = no compaction
	// MemoryFlush, when set, gives the model one silent turn to write
	// durable memories to the workspace (MEMORY.md, memory/<date>.md)
	// before a threshold compaction, in runs that offer the write tool
	// (flush.go); once per run and once per compaction cycle of the
	// session, journaled with the run's steps.
	MemoryFlush bool
	// Window configures the context-window guard.
	Window guard.WindowConfig
	// MaxToolIterations bounds the model calls of one turn's tool loop
	// (an attempt); Input.Settings may lower it per run. The reference has
	// no such cap: it stops a model that never stops calling tools.
	// Default MaxToolIterationsDefault.
	MaxToolIterations int
	// MaxToolRepeats stops a turn whose model makes the same tool call
	// (same tool, same arguments) and gets the same error this many
	// times, with a tool_loop reply: a model that does not take "Tool
	// exec not found" for an answer would otherwise spend every model
	// call the tool-loop limit allows. Input.Settings may lower it.
	// Default guard.ToolRepeatsDefault.
	MaxToolRepeats int
	// Retry is the same-key retry of transient provider failures.
	Retry RetryPolicy
	// AttemptTimeout bounds one attempt (the reference's
	// agents.defaults.timeoutSeconds); default 10 minutes.
	AttemptTimeout time.Duration
	// CompactionTimeout bounds one compaction; default 300 s.
	CompactionTimeout time.Duration
	// HistoryLimit keeps only the last n user turns in requests; 0 = all.
	HistoryLimit int
	// ContextCacheBytes bounds the history contexts the Runner keeps
	// across runs, to convert only the entries a session's history gained
	// since its last run (keyed by Input.SessionKey and SessionID); 0
	// means ContextCacheBytesDefault, < 0 keeps none.
	ContextCacheBytes int
	// Admission, when set, is asked before every model call (tenant
	// budgets), a compaction's too, and told what the call used; nil =
	// every call is made.
	Admission Admission
	// AdmitWait is the first wait of a run whose Admission is unavailable
	// (AdmitUnavailable); default AdmitWaitDefault.
	AdmitWait time.Duration
	// BlockReplies, when set, streams the reply as blocks (events.StreamBlock).
	BlockReplies *blockchunk.Config
	Logger       zerolog.Logger
	Now          func() time.Time
}

// Defaults.
const (
	AttemptTimeoutDefault    = 10 * time.Minute
	CompactionTimeoutDefault = 300 * time.Second
	MaxToolIterationsDefault = 200
)

// Runner runs turns. It is safe for concurrent use.
type Runner struct {
	cfg      Config
	probes   *probeLog
	contexts *contextCache // nil = none
	// policy is the worker's tool policy alone, the policies of every
	// run whose session adds none (shared: never written).
	policy tools.Policies
}

// New returns a Runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Resolver == nil {
		return nil, errors.New("runner: a Resolver is required")
	}
	if cfg.DefaultModel == "" {
		cfg.DefaultModel = "scripted/echo"
	}
	if cfg.MaxToolIterations <= 0 {
		cfg.MaxToolIterations = MaxToolIterationsDefault
	}
	if cfg.MaxToolRepeats <= 0 {
		cfg.MaxToolRepeats = guard.ToolRepeatsDefault
	}
	cfg.Retry = cfg.Retry.withDefaults()
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = AttemptTimeoutDefault
	}
	if cfg.AdmitWait <= 0 {
		cfg.AdmitWait = AdmitWaitDefault
	}
	if cfg.CompactionTimeout <= 0 {
		cfg.CompactionTimeout = CompactionTimeoutDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ContextCacheBytes == 0 {
		cfg.ContextCacheBytes = ContextCacheBytesDefault
	}
	r := &Runner{cfg: cfg, probes: &probeLog{m: map[string]time.Time{}}, policy: tools.Policies{cfg.ToolPolicy}}
	if cfg.ContextCacheBytes > 0 {
		r.contexts = newContextCache(cfg.ContextCacheBytes)
	}
	return r, nil
}

// Run runs one turn. Provider failures end the run with an error result (the
// turn is complete: its messages are stored and the client is told); Run
// returns an error only when the turn could not be run at all and should be
// retried, e.g. because ctx was cancelled.
func (r *Runner) Run(ctx context.Context, in Input, sink Sink) (*Output, error) {
	// The lane publishes the run's lifecycle start event before calling
	// the runner, and its end or error event from the Output.
	//
	// The run's set-up and its end are in setUp and conclude, not inlined
	// here: this frame stays on the turn's stack while the model answers
	// (see docs/scaling.md, "What a turn in flight holds").
	start := r.cfg.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ru := r.newRun(&in, sink, cancel)
	defer ru.logStateErrors()
	defer func() { r.contexts.release(ru.lease) }()
	req, early, err := ru.setUp(ctx, start)
	if req == nil {
		return early, err
	}
	model := &ru.model // not in this frame: see above
	var out *loopOut
	var after provider.Reason // why the last model failed over
	_, err = fallback.Run(ctx, *req, r.cfg.Now, func(ctx context.Context, step fallback.Step) error {
		var err error
		out, err = ru.tryModel(ctx, step, after, model)
		if err != nil {
			after = cmp.Or(failover.ClassifyError(err), provider.ReasonUnknown)
		}
		return err
	})
	return ru.conclude(ctx, start, model, out, err)
}

// newRun is a new run of in.
//
//go:noinline
func (r *Runner) newRun(in *Input, sink Sink, cancel context.CancelCauseFunc) *run {
	ru := &run{r: r, in: *in, sink: sink, cancel: cancel, b: builder{now: r.cfg.Now, parent: lastID(in.History)}}
	ru.sub.init(sink, r.cfg.BlockReplies)
	return ru
}

// setUp sets the run up up to its model chain: its journal, tools and
// prompt. It returns the chain's request, or with a nil request the run's
// output or error (a refused tool result, a model that cannot be named, a
// set-up that failed).
//
//go:noinline
func (ru *run) setUp(ctx context.Context, start time.Time) (*fallback.Request, *Output, error) {
	r, in, sink := ru.r, ru.in, ru.sink
	ru.repeats = guard.NewRepeats(ru.toolRepeats())
	j, err := openJournal(ctx, in.Steps, in)
	if err != nil {
		return nil, nil, err
	}
	ru.journal = j
	if j != nil && j.resumed > 0 {
		sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseResumed, Steps: j.resumed})
	}
	raw, err := ru.setupTools(ctx)
	if err != nil {
		return nil, nil, err
	}
	answers, refusal := ru.matchToolResults(in.Inbound.ToolResults)
	if refusal != "" {
		return nil, ru.ended(ru.refuse(start, refusal)), nil
	}
	ru.addToolResults(ctx, answers)
	ru.system = r.cfg.SystemPrompt
	if ps, ok := r.cfg.Tools.(PromptSource); ok {
		ru.system = ps.SystemPrompt(ctx, in, raw, ru.specs)
	}
	if in.Inbound.Heartbeat && strings.TrimSpace(in.Inbound.Text) == "" && len(in.Inbound.Images) == 0 {
		hb := *in.Inbound
		hb.Text = agentprompt.HeartbeatPrompt
		ru.in.Inbound = &hb
	}
	if strings.TrimSpace(ru.in.Inbound.Text) != "" || len(ru.in.Inbound.Images) > 0 {
		ru.addPrompt(ctx, start)
	}

	ref := in.Inbound.Model
	if ref == "" {
		ref = r.defaultModel(in.Settings)
	}
	fcfg := &fallback.Config{Primary: r.defaultModel(in.Settings), Fallbacks: r.fallbacks(in.Settings), Aliases: r.cfg.Aliases}
	requested, ok := fcfg.ParseRef(ref, "")
	if !ok || requested.Provider == "" {
		// A model that cannot even be named is never answered by another
		// one: the run fails before any attempt (runtime spec §3.1 step 2).
		return nil, ru.ended(ru.fail(start, provider.Model{}, &provider.Error{Reason: provider.ReasonModelNotFound, Status: 404, Message: "Unknown model: " + ref}, nil)), nil
	}
	return &fallback.Request{Config: fcfg, Provider: requested.Provider, Model: requested.Model,
		Classifier: fallback.ProviderClassifier, Availability: availability(r.cfg.Auth, r.cfg.Now), Probes: r.probes,
		LastResort: lastResortOn(r.cfg.Auth)}, nil, nil
}

// conclude ends a run whose model chain ended with err: its output, or
// the error of a run that could not be run.
//
//go:noinline
func (ru *run) conclude(ctx context.Context, start time.Time, model *provider.Model, out *loopOut, err error) (*Output, error) {
	switch {
	case ru.fatal != nil:
		return nil, ru.fatal
	case err == nil:
		return ru.ended(ru.finish(start, *model, out)), nil
	case ctx.Err() != nil:
		return ru.partial(), context.Cause(ctx)
	}
	return ru.ended(ru.fail(start, *model, err, out)), nil
}

// ended tells the EndHook about a finished run and returns out.
func (ru *run) ended(out *Output) *Output {
	if h := ru.r.cfg.EndHook; h != nil {
		h.AgentEnd(EndHookInput{SessionKey: ru.in.SessionKey, RunID: ru.in.RunID, Attempt: ru.in.Attempt, Result: out.Result})
	}
	return out
}

// partial is a cancelled turn so far, for a caller that keeps what
// happened (an interrupt): the prompt, the completed replies and the tool
// results, and for each call of the last reply left without a result the
// reference's synthetic error result. Its Result is nil.
func (ru *run) partial() *Output {
	answered := map[string]bool{}
	for _, e := range ru.b.entries {
		if m := e.Message; m != nil && m.Role == message.RoleToolResult {
			answered[m.ToolCallID] = true
		}
	}
	if last := ru.lastAssistant(); last != nil {
		for _, c := range last.ToolCalls() {
			if !answered[c.ID] {
				ru.b.add(message.Message{Role: message.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
					Content: message.BlocksOf(message.Text(sanitize.MissingToolResultText)), IsError: true, Timestamp: ru.r.cfg.Now().UnixMilli()})
			}
		}
	}
	return &Output{Entries: ru.b.entries, Usage: ru.usage}
}

// addPrompt appends the user's message, with the context the before-start
// hooks prepend; a hook may also replace the system prompt.
func (ru *run) addPrompt(ctx context.Context, start time.Time) {
	in, cfg := ru.in, ru.r.cfg
	inbound := in.Inbound
	if len(cfg.Hooks) > 0 {
		prepend, override := agentprompt.RunHooks(ctx, cfg.Hooks, agentprompt.HookInput{Prompt: inbound.Text,
			SystemPrompt: ru.system, SessionKey: in.SessionKey, RunID: in.RunID},
			func(err error) { cfg.Logger.Warn().Err(err).Str("run_id", in.RunID).Msg("before-start hook failed") })
		if override != "" {
			ru.system = override
		}
		if prepend != "" {
			withContext := *inbound
			withContext.Text = agentprompt.JoinPrompt(prepend, inbound.Text)
			inbound = &withContext
		}
	}
	ru.b.add(userMessage(inbound, start))
}

// tryModel runs the loop on one candidate of the model chain, after the
// one before it failed over for reason after; *model is set once the
// candidate resolves. As in the reference, the loop throws
// failover errors to the chain only when fallbacks are configured;
// otherwise a failed model ends the run with its error reply.
func (ru *run) tryModel(ctx context.Context, step fallback.Step, after provider.Reason, model *provider.Model) (*loopOut, error) {
	l, err := ru.loopOf(step, after, model)
	if err != nil {
		return nil, err
	}
	return runLoop(ctx, l)
}

// loopOf sets up tryModel's candidate and returns its loop. It is not
// inlined in tryModel: that frame stays on the turn's stack while the
// model answers (see docs/scaling.md, "What a turn in flight holds").
//
//go:noinline
func (ru *run) loopOf(step fallback.Step, after provider.Reason, model *provider.Model) (*modelLoop, error) {
	cfg := ru.r.cfg
	m, prov, w, err := setupModel(cfg.Resolver, step.Candidate.String(), cfg.Window)
	if m.ID != "" || err == nil {
		// The loop runs the run's model: *model, not a copy of m.
		*model = m
	}
	if err != nil {
		return nil, err
	}
	if w.ShouldWarn {
		cfg.Logger.Warn().Str("model", m.Ref()).Int("context_window", w.Tokens).Msg("small context window")
	}
	ru.window = w.Tokens
	return newModelLoop(loopReq{runID: ru.in.RunID, model: model, prov: prov, contextWindow: w.Tokens,
		thinking: provider.ThinkingLevel(strings.ToLower(ru.in.Inbound.Thinking)), auth: cfg.Auth,
		preferred: ru.in.Settings.AuthProfile, locked: locked(ru.in.Settings),
		fallbackConfigured: len(ru.r.fallbacks(ru.in.Settings)) > 0, lastResort: step.Last, maxWait: cfg.AttemptTimeout,
		hop: step.Index, after: after, now: cfg.Now, stateErr: ru.stateErr}, ru), nil
}

// setupModel makes the decisions the reference makes before any attempt
// of a model (runtime spec §3.1 steps 2-3): it resolves the
// "provider/model-id" reference, then resolves its context window
// (guard.ResolveWindow). An unknown model throws a failover error with
// reason model_not_found, "Unknown model: <ref>" and the resolver's
// reason; a window under the hard minimum one with reason unknown and the
// reference's "Model context window too small (<n> tokens). Minimum is
// <min>." The model is returned once it resolves (the zero Model before).
func setupModel(res Resolver, ref string, wcfg guard.WindowConfig) (provider.Model, provider.Provider, guard.Window, error) {
	m, prov, err := res.Resolve(ref)
	if err != nil {
		// The reference's error has no status (the chain's
		// classification gives model_not_found its 404).
		return provider.Model{}, nil, guard.Window{}, &provider.Error{Reason: provider.ReasonModelNotFound, Message: "Unknown model: " + ref, Err: err}
	}
	w := guard.ResolveWindow(m.Provider, m.ID, float64(m.ContextWindow), wcfg)
	if err := w.Err(); err != nil {
		return m, prov, w, &provider.Error{Reason: provider.ReasonUnknown, Message: err.Error(), Err: err}
	}
	return m, prov, w, nil
}

// locked is the profile a run's settings pin, "" when none.
func locked(s Settings) string {
	if s.AuthProfileLocked {
		return s.AuthProfile
	}
	return ""
}

// stateErr keeps a fleet-state write that failed: the run goes on (a lost
// cooldown or usage mark is not worth failing a turn), and Run logs them
// once when it ends.
func (ru *run) stateErr(err error) { ru.stateErrs = append(ru.stateErrs, err) }

func (ru *run) logStateErrors() {
	if len(ru.stateErrs) > 0 {
		ru.r.cfg.Logger.Warn().Err(errors.Join(ru.stateErrs...)).Str("run_id", ru.in.RunID).
			Int("failed_writes", len(ru.stateErrs)).Msg("auth-profile state not recorded")
	}
}

// maxListedCalls bounds the waiting calls a refusal lists.
const maxListedCalls = 10

// ApprovalWords are the answers that approve a call waiting for approval
// (case-insensitive); any other answer, or an error result, refuses it.
var ApprovalWords = []string{"approve", "approved", "yes", "allow"}

// TextDenied is the tool result the model sees for a refused call.
const TextDenied = "The user denied this tool call; it did not run."

// finish makes the output of a run whose model loop returned. The run's
// end or error event is the lane's, made from the result.
func (ru *run) finish(start time.Time, model provider.Model, out *loopOut) *Output {
	res := out.result(model, ru.in.SessionID, ru.r.cfg.Now().Sub(start))
	entries := ru.b.entries
	if ru.heartbeatAck(res) {
		// OpenClaw's heartbeat semantics: an acknowledgement is not
		// delivered, and the zero-information exchange is pruned from the
		// transcript (its usage still counts).
		res.Payloads, res.Meta.HeartbeatOK, entries = nil, true, nil
	}
	return &Output{Entries: entries, Result: res, Usage: ru.usage, AuthProfile: out.profile}
}

// heartbeatAck reports whether res ends a heartbeat turn with only the
// "nothing to report" token (agentprompt.HeartbeatAck): no error, no call
// left waiting, no tool results brought in by the message.
func (ru *run) heartbeatAck(res *events.Result) bool {
	in := ru.in.Inbound
	if !in.Heartbeat || len(in.ToolResults) > 0 || res.Meta.Error != nil || res.Meta.Aborted || len(res.Meta.PendingToolCalls) > 0 || len(res.Payloads) == 0 {
		return false
	}
	texts := make([]string, 0, len(res.Payloads))
	for _, p := range res.Payloads {
		if p.IsError {
			return false
		}
		texts = append(texts, p.Text)
	}
	return agentprompt.HeartbeatAck(strings.Join(texts, "\n"))
}

// refuse makes the output of a run refused as it was sent (an
// invalid_input error): no model was called and nothing is added to the
// transcript.
func (ru *run) refuse(start time.Time, msg string) *Output {
	return ru.finish(start, provider.Model{}, &loopOut{payloads: []events.Payload{{Text: msg, IsError: true}},
		runErr: &events.RunError{Kind: events.KindInvalidInput, Message: msg}})
}

// fail makes the output of a run that ended with an error no model loop
// could turn into a reply (the reference throws these); last is what the
// last model's loop did (nil: none ran), whose usage the result reports.
func (ru *run) fail(start time.Time, model provider.Model, err error, last *loopOut) *Output {
	text := errText(err)
	var pe *provider.Error
	var ex *fallback.ExhaustedError
	switch {
	case errors.As(err, &ex):
		text = ex.Error()
	case errors.As(err, &pe):
		text = failover.UserText(text, model.Provider, model.ID)
	}
	kind := "provider_error"
	if failover.ClassifyError(err) == provider.ReasonModelNotFound {
		kind = "model_not_found"
	}
	out := &loopOut{payloads: []events.Payload{{Text: text, IsError: true}},
		runErr: &events.RunError{Kind: kind, Message: failover.Label(err) + ": " + errText(err)}}
	if last != nil {
		out.usage = last.usage
	}
	return ru.finish(start, model, out)
}

// probeLog is a fallback.ProbeThrottle shared by a Runner's runs.
type probeLog struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (p *probeLog) LastProbe(prov string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[prov]
}

func (p *probeLog) MarkProbe(prov string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[prov] = at
}

// errText is an error's message: a provider error's own text, else the
// error's.
func errText(err error) string {
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Message != "" {
		return pe.Message
	}
	return err.Error()
}

func userMessage(in *events.Inbound, now time.Time) message.Message {
	m := message.Message{Role: message.RoleUser, Timestamp: now.UnixMilli()}
	if len(in.Images) == 0 {
		m.Content = message.PlainText(in.Text)
		return m
	}
	var blocks []message.Block
	if in.Text != "" {
		blocks = append(blocks, message.Text(in.Text))
	}
	for _, img := range in.Images {
		blocks = append(blocks, message.Image(img.MimeType, img.Data))
	}
	m.Content = message.BlocksOf(blocks...)
	return m
}

// costMeta is c for a result's meta, nil when nothing was priced.
func costMeta(c message.Cost) *events.CostMeta {
	if c == (message.Cost{}) {
		return nil
	}
	return &events.CostMeta{Input: c.Input, Output: c.Output, CacheRead: c.CacheRead, CacheWrite: c.CacheWrite, Total: c.Total}
}
