package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/version"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/metrics"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tracing"
)

// Observation happens at the member's edges, never inside the runner or
// the lanes: the turn handler (turn span, outcome, duration, queue wait,
// the run's log line), the providers the resolver hands out (a span and
// metrics per model call), the sink a turn's events go through (tool
// spans and counts, compactions, the first reply delta) and, at scrape
// time, the lane worker's counters and the streams' state.

// observer is what a member observes with.
type observer struct {
	metrics *metrics.Metrics // nil = no metrics
	tracer  *tracing.Tracer  // nil = no spans
	known   map[string]bool  // worker tool names, counted by name
	globs   []string         // --remote-tools globs: their tools are counted under the glob
}

func newObserver(cfg Config, m *metrics.Metrics) observer {
	o := observer{metrics: m, known: map[string]bool{},
		tracer: cfg.TracerProvider.Tracer(tracing.ScopeName, version.Get().Version)}
	for _, name := range append(tools.BuiltinNames(), cfg.RemoteTools...) {
		if strings.Contains(name, "*") {
			o.globs = append(o.globs, name)
			continue
		}
		o.known[name] = true
	}
	return o
}

// toolLabel is the metric label of a tool the worker ran: its name when
// it is a built-in or a listed remote tool, the --remote-tools glob that
// allowed it (one label per glob, however many tools an MCP server
// lists), else "unknown" (a tool the model made up).
func (o *observer) toolLabel(name string) string {
	if o.known[name] {
		return name
	}
	for _, g := range o.globs {
		if ok, _ := path.Match(g, name); ok {
			return g
		}
	}
	return "unknown"
}

// turnObs is one turn's observation, handed to the sink and the providers
// through the turn's context.
type turnObs struct {
	o        *observer
	received time.Time
	ctx      context.Context // the attempt span's

	// The turn's start, session fingerprint and spans, for its end
	// (Member.endTurn).
	start                 time.Time
	fp                    string
	turnSpan, attemptSpan *tracing.Span

	mu        sync.Mutex
	firstSeen bool
	tools     map[string]toolCall // open tool spans by call id (nil until a tool runs)
}

type toolCall struct {
	name string
	span *tracing.Span
}

type turnObsKey struct{}

// observe runs a turn through handle, observed: a turn span continuing the
// sender's trace (from the message's headers, started when the message
// arrived) with an attempt span under it, the turn's metrics, and one log
// line when it ends.
//
// The observation's start and end are in beginTurn and endTurn, not
// inlined here: this frame stays on the turn's stack while its model
// answers (see docs/scaling.md, "What a turn in flight holds").
func (m *Member) observe(ctx context.Context, t *lanes.Turn) (*lanes.Outcome, error) {
	obs, release, err := m.beginTurn(ctx, t)
	var out *lanes.Outcome
	if err == nil {
		func() {
			defer release() // a panicking handler (recovered by lanes) must not keep the hold, renewed for ever
			out, err = m.handle(context.WithValue(obs.ctx, turnObsKey{}, obs), t)
		}()
	}
	m.endTurn(obs, t, out, err)
	return out, err
}

// beginTurn starts a turn's observation (its spans and queue wait) and
// takes the tenant's quota of turns at once; release gives that back.
//
//go:noinline
func (m *Member) beginTurn(ctx context.Context, t *lanes.Turn) (obs *turnObs, release func(), err error) {
	start := time.Now()
	fp := events.Fingerprint(t.SessionKey)
	if t.Attempt <= 1 {
		m.obs.metrics.QueueWait(m.Tenants().Tenant(t.SessionKey), start.Sub(t.Received))
	}
	common := []tracing.KeyValue{tracing.String(tracing.AttrRun, t.RunID), tracing.Int(tracing.AttrAttempt, t.Attempt),
		tracing.String(tracing.AttrSession, fp), tracing.String(tracing.AttrWorker, t.Worker)}
	if p := parentOf(t); p != nil {
		common = append(common, tracing.String(tracing.AttrParentSession, events.Fingerprint(p.Session)), tracing.String(tracing.AttrParentRun, p.Run))
	}
	ctx = tracing.Extract(ctx, t.Header)
	ctx, turnSpan := m.obs.tracer.Start(ctx, tracing.OpInvokeAgent+" lanefleet", tracing.WithSpanKind(tracing.SpanKindConsumer), tracing.WithTimestamp(t.Received),
		tracing.WithAttributes(append(common, tracing.String(tracing.AttrOperation, tracing.OpInvokeAgent), tracing.String(tracing.AttrAgentName, "lanefleet"),
			tracing.String(tracing.AttrConversationID, t.SessionID), tracing.Int64(tracing.AttrQueueWaitMs, start.Sub(t.Received).Milliseconds()))...))
	ctx, attemptSpan := m.obs.tracer.Start(ctx, fmt.Sprintf("attempt %d", t.Attempt), tracing.WithAttributes(common...))
	obs = &turnObs{o: &m.obs, received: t.Received, ctx: ctx,
		start: start, fp: fp, turnSpan: turnSpan, attemptSpan: attemptSpan}
	release, err = m.budgets.takeTurn(ctx, t.SessionKey) // the tenant's quota of turns at once
	return obs, release, err
}

// endTurn ends a turn's observation: its metrics, spans and log line.
//
//go:noinline
func (m *Member) endTurn(obs *turnObs, t *lanes.Turn, out *lanes.Outcome, err error) {
	start, fp, ctx, attemptSpan, turnSpan := obs.start, obs.fp, obs.ctx, obs.attemptSpan, obs.turnSpan
	d := time.Since(start)
	obs.close()

	outcome, kind := outcomeOf(ctx, out, err)
	m.obs.metrics.TurnEnded(outcome, kind, d)
	log := m.log.Info()
	if outcome == metrics.OutcomeFailed {
		log = m.log.Warn().Err(err)
	}
	log = log.Str("session", fp).Str("run_id", t.RunID).Int("attempt", t.Attempt).Str("outcome", outcome).Dur("duration_ms", d).
		Dur("queue_wait_ms", start.Sub(t.Received))
	for _, s := range []*tracing.Span{attemptSpan, turnSpan} {
		s.SetAttributes(tracing.String(tracing.AttrOutcome, outcome))
	}
	if kind != "" {
		log = log.Str("error_kind", kind)
		attemptSpan.SetAttributes(tracing.String(tracing.AttrErrorType, kind))
		turnSpan.SetAttributes(tracing.String(tracing.AttrErrorType, kind))
	}
	if out != nil && out.Result != nil && out.Result.Meta.AgentMeta != nil {
		am := out.Result.Meta.AgentMeta
		log = log.Str("model", am.Provider+"/"+am.Model)
		turnSpan.SetAttributes(tracing.String(tracing.AttrRequestModel, am.Model), tracing.String(tracing.AttrProvider, am.Provider))
		if u := am.Usage; u != nil {
			// tokens is the sum of the parts the line shows: a provider's
			// own total may count otherwise (its last call's, or input only).
			log = log.Int64("tokens_in", u.Input).Int64("tokens_out", u.Output).Int64("tokens_cache_read", u.CacheRead).
				Int64("tokens_cache_write", u.CacheWrite).Int64("tokens", u.Input+u.Output+u.CacheRead+u.CacheWrite)
			turnSpan.SetAttributes(tracing.Int64(tracing.AttrInputTokens, u.Input), tracing.Int64(tracing.AttrOutputTokens, u.Output))
			if u.Cost != nil && u.Cost.Total > 0 {
				log = log.Float64("cost_usd", u.Cost.Total)
				turnSpan.SetAttributes(tracing.Float64(tracing.AttrCostUSD, u.Cost.Total))
			}
		}
	}
	switch outcome {
	case metrics.OutcomeFailed, metrics.OutcomeError:
		desc := kind
		if err != nil {
			desc = m.cfg.Redactor.String(err.Error()) // traces leave the worker like its logs
		}
		attemptSpan.SetStatus(tracing.StatusError, desc)
		turnSpan.SetStatus(tracing.StatusError, desc)
	}
	attemptSpan.End()
	turnSpan.End()
	if outcome == metrics.OutcomeFailed {
		log.Msg("run attempt failed; the lane retries it")
	} else {
		log.Msg("run ended")
	}
}

// outcomeOf classifies a turn's end for the metrics and the log line.
func outcomeOf(ctx context.Context, out *lanes.Outcome, err error) (outcome, kind string) {
	switch {
	case err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled)):
		return metrics.OutcomeAborted, ""
	case err != nil:
		return metrics.OutcomeFailed, ""
	case out == nil || out.Result == nil:
		return metrics.OutcomeOK, ""
	case out.Result.Meta.Error != nil:
		return metrics.OutcomeError, out.Result.Meta.Error.Kind
	case out.Result.Meta.Aborted:
		return metrics.OutcomeAborted, ""
	case len(out.Result.Meta.PendingToolCalls) > 0:
		return metrics.OutcomeToolCalls, ""
	}
	return metrics.OutcomeOK, ""
}

// sink wraps the sink a turn's events go through with the turn's
// observation (when the turn is observed).
func observeSink(ctx context.Context, s runner.Sink) runner.Sink {
	obs, ok := ctx.Value(turnObsKey{}).(*turnObs)
	if !ok {
		return s
	}
	return &obsSink{Sink: s, obs: obs}
}

// obsSink sees a turn's events on their way out.
type obsSink struct {
	runner.Sink
	obs *turnObs
}

// Emit has a pointer receiver, as phaseSink's has.
func (s *obsSink) Emit(stream string, data events.EventData) {
	s.Sink.Emit(stream, data)
	s.obs.event(stream, data)
}

func (t *turnObs) event(stream string, data events.EventData) {
	switch stream {
	case events.StreamAssistant, events.StreamThinking:
		if data.Phase != "" || data.Delta == "" {
			return
		}
		t.mu.Lock()
		first := !t.firstSeen
		t.firstSeen = true
		t.mu.Unlock()
		if first {
			t.o.metrics.FirstEvent(time.Since(t.received))
		}
	case events.StreamTool:
		switch data.Phase {
		case events.PhaseStart:
			_, span := t.o.tracer.Start(t.ctx, tracing.OpExecuteTool+" "+data.Name, tracing.WithSpanKind(tracing.SpanKindInternal),
				tracing.WithAttributes(tracing.String(tracing.AttrOperation, tracing.OpExecuteTool), tracing.String(tracing.AttrToolName, data.Name),
					tracing.String(tracing.AttrToolCallID, data.ToolCallID)))
			t.mu.Lock()
			if t.tools == nil {
				t.tools = map[string]toolCall{}
			}
			t.tools[data.ToolCallID] = toolCall{name: data.Name, span: span}
			t.mu.Unlock()
		case events.PhaseResult:
			t.mu.Lock()
			call, ran := t.tools[data.ToolCallID]
			delete(t.tools, data.ToolCallID)
			t.mu.Unlock()
			name := "client" // a client's result (or an approval's refusal): no worker ran it
			if ran {
				name = t.o.toolLabel(data.Name)
				if data.IsError {
					call.span.SetStatus(tracing.StatusError, "tool error")
					call.span.SetAttributes(tracing.String(tracing.AttrErrorType, "tool_error"))
				}
				call.span.End()
			}
			t.o.metrics.ToolCall(name, data.IsError)
		}
	case events.StreamCompaction:
		if data.Phase != events.PhaseEnd {
			return
		}
		reason := metrics.CompactionThreshold
		switch {
		case data.Error != "":
			reason = metrics.CompactionFailed
		case data.WillRetry:
			reason = metrics.CompactionOverflow
		}
		t.o.metrics.Compaction(reason)
	}
}

// close ends the tool spans a cancelled turn left open.
func (t *turnObs) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, c := range t.tools {
		c.span.SetStatus(tracing.StatusError, "the turn ended before the tool")
		c.span.End()
		delete(t.tools, id)
	}
}

// observedResolver hands out providers that observe their calls.
type observedResolver struct {
	runner.Resolver
	obs *observer
}

func (r observedResolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	m, p, err := r.Resolver.Resolve(ref)
	if p != nil {
		p = &observedProvider{p: p, obs: r.obs} // a pointer: the value's method wrapper would copy the reply once more on the turn's stack
	}
	return m, p, err
}

// observedProvider records a span and the metrics of every model call.
type observedProvider struct {
	p   provider.Provider
	obs *observer
}

// Stream calls the model between startCall and endCall, which are not
// inlined here: this frame stays on the turn's stack while the model
// answers (see docs/scaling.md, "What a turn in flight holds").
func (o *observedProvider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (am message.Message, err error) {
	ctx, span := o.startCall(ctx, req)
	start := time.Now()
	am, err = o.p.Stream(ctx, req, emit)
	o.endCall(span, req, time.Since(start), &am, err)
	return am, err
}

// startCall starts a model call's span.
//
//go:noinline
func (o *observedProvider) startCall(ctx context.Context, req *provider.Request) (context.Context, *tracing.Span) {
	return o.obs.tracer.Start(ctx, tracing.OpChat+" "+req.Model.ID, tracing.WithSpanKind(tracing.SpanKindClient),
		tracing.WithAttributes(tracing.String(tracing.AttrOperation, tracing.OpChat), tracing.String(tracing.AttrSystem, req.Model.Provider),
			tracing.String(tracing.AttrProvider, req.Model.Provider), tracing.String(tracing.AttrRequestModel, req.Model.ID)))
}

// endCall records a model call that took d and answered am or err: its
// metrics and the end of its span.
//
//go:noinline
func (o *observedProvider) endCall(span *tracing.Span, req *provider.Request, d time.Duration, am *message.Message, err error) {
	outcome := "ok"
	switch {
	case err != nil:
		outcome = string(provider.ReasonOf(err))
	case am.StopReason == message.StopAborted:
		outcome = string(provider.ReasonAborted)
	case am.StopReason == message.StopError:
		outcome = string(provider.ReasonUnknown)
	}
	o.obs.metrics.ProviderCall(req.Model.Provider, req.Model.ID, outcome, d, am.Usage)
	if am.Model != "" {
		span.SetAttributes(tracing.String(tracing.AttrResponseModel, am.Model))
	}
	if am.StopReason != "" {
		span.SetAttributes(tracing.StringSlice(tracing.AttrFinishReasons, []string{string(am.StopReason)}))
	}
	if u := am.Usage; u != nil {
		span.SetAttributes(tracing.Int64(tracing.AttrInputTokens, u.Input), tracing.Int64(tracing.AttrOutputTokens, u.Output),
			tracing.Int64(tracing.AttrCacheRead, u.CacheRead), tracing.Int64(tracing.AttrCacheWrite, u.CacheWrite))
		if u.Cost.Total > 0 {
			span.SetAttributes(tracing.Float64(tracing.AttrCostUSD, u.Cost.Total))
		}
	}
	if outcome != "ok" {
		span.SetAttributes(tracing.String(tracing.AttrErrorType, outcome))
		msg := am.ErrorMessage
		if err != nil {
			msg = err.Error()
		}
		span.SetStatus(tracing.StatusError, msg)
	}
	span.End()
}

// metricsState is what the member's metrics read at scrape time.
func (m *Member) metricsState() metrics.State {
	return metrics.State{
		LanesActive:  m.Worker.Active,
		LanesWaiting: m.Worker.Waiting,
		Backlog: func(ctx context.Context) (uint64, error) {
			info, err := m.Streams.Inbound.Info(ctx)
			if err != nil {
				return 0, err
			}
			return info.State.Msgs, nil
		},
		Cooldowns:          func() map[string]int { return cooldowns(m.authBook().Status(time.Now())) },
		DeadLetters:        m.Worker.Stats().DeadLettersByReason,
		DeadLetterFailures: m.Worker.Stats().DeadLetterFailures.Load,
		LaneEvents: func() map[string]int64 {
			s := m.Worker.Stats()
			return map[string]int64{"turns": s.Turns.Load(), "acquired": s.Acquired.Load(), "released": s.Released.Load(),
				"merged": s.Merged.Load(), "dropped": s.Dropped.Load(), "aborted": s.Aborted.Load(), "duplicates": s.Duplicates.Load(), "swept": s.Swept.Load(),
				"naks": s.Naks.Load(), "follower_acks": s.FollowerAcks.Load(),
				"yields": s.Yields.Load(), "waited": s.Waited.Load(), "handed_back": s.HandedBack.Load()}
		},
	}
}

// cooldowns counts the profiles cooling or disabled now, by provider
// (every provider with a profile appears, with 0 when none cools).
func cooldowns(profiles []admin.AuthProfile, _ map[string]string) map[string]int {
	out := map[string]int{}
	for _, p := range profiles {
		n := 0
		if p.Cooling || len(p.Models) > 0 {
			n = 1
		}
		out[p.Provider] += n
	}
	return out
}

// ready says whether the member takes lanes: connected, its inbound
// stream answering, its worker consuming.
func (m *Member) ready(ctx context.Context) error {
	if !m.Conn.IsConnected() {
		return fmt.Errorf("not connected to NATS (%s)", m.Conn.Status())
	}
	if _, err := m.Streams.Inbound.Info(ctx); err != nil {
		return fmt.Errorf("the inbound stream does not answer: %w", err)
	}
	if !m.Worker.Accepting() {
		return errors.New("the worker does not take lanes (starting or stopping)")
	}
	return nil
}

// authBook is the admin service's view of the member's auth profiles.
func (m *Member) authBook() fleetAuthBook { return fleetAuthBook{fleetAuth{s: m.Auth, creds: m.creds}} }

type fleetAuthBook struct{ a fleetAuth }

// Status lists the member's profiles with their fleet-wide state; models
// lists only windows still running.
func (b fleetAuthBook) Status(now time.Time) ([]admin.AuthProfile, map[string]string) {
	if b.a.s == nil || b.a.creds == nil {
		return nil, nil
	}
	snap, _ := b.a.Snapshot()
	out := make([]admin.AuthProfile, 0, len(snap.Profiles))
	for _, p := range snap.Profiles {
		st := snap.Usage[p.ID]
		ap := admin.AuthProfile{ID: p.ID, Provider: p.Provider, Type: string(p.Type), Cooling: authprofile.InCooldown(p.Provider, st, "", now),
			ErrorCount: st.ErrorCount, LastUsed: st.LastUsed, LastFailureAt: st.LastFailureAt, DisabledReason: string(st.DisabledReason)}
		if st.CooldownUntil > now.UnixMilli() {
			ap.CooldownUntil = st.CooldownUntil
		}
		if st.DisabledUntil > now.UnixMilli() {
			ap.DisabledUntil = st.DisabledUntil
		} else {
			ap.DisabledReason = ""
		}
		if st.RetryUntil > now.UnixMilli() {
			ap.RetryUntil = st.RetryUntil
		}
		for r, n := range st.FailureCounts {
			if ap.FailureCounts == nil {
				ap.FailureCounts = map[string]int{}
			}
			ap.FailureCounts[string(r)] = n
		}
		for model, ms := range st.Models {
			if authprofile.InCooldown(p.Provider, st, model, now) && ms.CooldownUntil > now.UnixMilli() {
				if ap.Models == nil {
					ap.Models = map[string]int64{}
				}
				ap.Models[model] = ms.CooldownUntil
			}
		}
		out = append(out, ap)
	}
	slices.SortFunc(out, func(a, b admin.AuthProfile) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.ID, b.ID))
	})
	return out, snap.LastGood
}

// Reset clears a profile's cooldowns fleet-wide (the reference's
// clearAuthProfileCooldown).
func (b fleetAuthBook) Reset(ctx context.Context, id string) (cleared, ok bool, err error) {
	if b.a.s == nil || b.a.creds == nil {
		return false, false, nil
	}
	if _, ok := b.a.creds.Profile(id); !ok {
		return false, false, nil
	}
	before, _ := b.a.s.State(id)
	if err := b.a.Apply(ctx, id, authprofile.Event{Kind: authprofile.EventClearCooldown}); err != nil {
		return false, true, err
	}
	return before.CooldownUntil != 0 || before.DisabledUntil != 0 || before.ErrorCount != 0 || len(before.Models) != 0 || before.RetryUntil != 0, true, nil
}

// parentOf is the parent of a sub-agent's turn: the one its session
// adopted, or the one its spawn message names (nil = none).
func parentOf(t *lanes.Turn) *events.Parent {
	if t.State.Parent != nil {
		return t.State.Parent
	}
	if t.Inbound != nil {
		return t.Inbound.Parent
	}
	return nil
}
