package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/subagent"
	"github.com/lanefleet/lanefleet/tools"
)

// handle adapts a lane turn to the runner, registering the run in the
// active-run registry while it runs.
//
// Its set-up and its outcome are in prepareRun and runOutcome, not
// inlined here: this frame stays on the turn's stack while the model
// answers (see docs/scaling.md, "What a turn in flight holds").
func (m *Member) handle(ctx context.Context, t *lanes.Turn) (*lanes.Outcome, error) {
	pr, refused, err := m.prepareRun(ctx, t)
	if pr == nil {
		return refused, err
	}
	if pr.writeBack != nil {
		defer pr.writeBack()
	}
	defer pr.reg.clear(pr.ctx)
	ctx, mk := pr.ctx, pr.mk
	out, err := m.Runner.Run(ctx, pr.in, observeSink(ctx, &phaseSink{Sink: shown(t), reg: pr.reg}))
	return runOutcome(t, mk, out, err)
}

// preparedRun is a turn set up for the runner: its input, its context
// (with the agent's workspace and the turn's masker), the masker, its
// registration in the active-run registry and the agent's workspace
// write-back (nil without an agent).
type preparedRun struct {
	ctx       context.Context
	in        runner.Input
	mk        *redact.Masker
	reg       *registration
	writeBack func()
}

// prepareRun sets a turn up for the runner; a nil run comes with the
// turn's outcome or error instead (a command, a refusal, a workspace that
// could not be seeded).
//
//go:noinline
func (m *Member) prepareRun(ctx context.Context, t *lanes.Turn) (*preparedRun, *lanes.Outcome, error) {
	if t.Command != nil {
		out, err := m.command(ctx, t)
		return nil, out, err
	}
	if c, ok := subagent.StoppedChild(&t.State, t.Inbound); ok {
		// The completion of a child this session's stop was passed on
		// to: the session was stopped, so no model answers it; the lane
		// takes the child off and counts its use.
		return nil, &lanes.Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: subagent.StoppedText(c)}}}}, nil
	}
	inbound, settings, from := runSettings(t)
	ag, why := m.turnAgent(ctx, t.SessionKey)
	if why != "" {
		// Refused like a model the fleet does not run: the sender is
		// told at once, and the message is not kept (re-running it
		// cannot succeed until an operator defines the agent; the
		// sender who was told resends).
		return nil, refuse(events.KindInvalidInput, why), nil
	}
	if ag != nil {
		if inbound, why = m.applyAgent(ag, inbound, &settings, &from); why != "" {
			return nil, refuse(events.KindInvalidInput, why), nil
		}
	}
	if ref := inbound.Model; ref != "" {
		if why := m.models.Refuse(ref, from); why != "" {
			return nil, refuse(events.KindInvalidInput, why), nil
		}
	}
	if why := m.clientToolClash(inbound.Tools); why != "" {
		return nil, refuse(events.KindInvalidInput, why), nil
	}
	if settings.AuthProfileLocked {
		store, _ := fleetAuth{s: m.Auth, creds: m.creds}.Snapshot()
		if pe, ok := errors.AsType[*authprofile.PinError](m.pins.Check(store, settings.AuthProfile, time.Now())); ok {
			where := ""
			if t.Inbound.AuthProfile == "" {
				where = " (the session's setting)"
			}
			return nil, refuse(events.KindInvalidInput, fmt.Sprintf("auth profile %q%s %s", pe.ID, where, pe.Reason)), nil
		}
	}
	pr := &preparedRun{}
	if ag != nil {
		ta, writeBack, err := m.seedAgent(ctx, t, ag)
		if err != nil {
			return nil, nil, fmt.Errorf("fleet: agent %s: workspace: %w", ag.ID, err)
		}
		pr.writeBack = writeBack
		ctx = withAgent(ctx, ta)
	}
	pr.reg = m.register(ctx, t)
	mk, steer := turnMasker(m.cfg.Redactor, t, inbound)
	pr.ctx, pr.mk = withMasker(ctx, mk), mk
	pr.in = runner.Input{SessionKey: t.SessionKey, SessionID: t.SessionID, RunID: t.RunID,
		Attempt: t.Attempt, Inbound: inbound, History: t.History, Steer: steer, Settings: settings, Approvals: t.State.Approvals,
		Lineage: subagent.Lineage(parentOf(t)),
		// The lane's transcript only grows in place; any other change
		// to it is a new array (lanes.Turn.History).
		HistoryAppendOnly: true}
	if steps := t.Steps(); steps != nil && !m.cfg.NoStepJournal {
		pr.in.Steps = steps
	}
	return pr, nil, nil
}

// runOutcome is the lane's outcome of a turn the runner ran.
//
//go:noinline
func runOutcome(t *lanes.Turn, mk *redact.Masker, out *runner.Output, err error) (*lanes.Outcome, error) {
	if err != nil {
		// The lane shows a failed attempt's error to the sender and in
		// the dead letter: masked like everything else the turn produces.
		err = maskError(mk, err)
		if out != nil {
			// A cut turn's progress, which an interrupt keeps, and what
			// its model calls cost.
			return &lanes.Outcome{Entries: out.Entries, Usage: runner.UsageMeta(out.Usage), AuthProfile: out.AuthProfile,
				Spawned: subagent.Spawned(out.Entries, t.RunID, time.Now().UnixMilli())}, err
		}
		return nil, err
	}
	return &lanes.Outcome{Entries: out.Entries, Result: out.Result, Usage: runner.UsageMeta(out.Usage), AuthProfile: out.AuthProfile, EndText: out.EndText,
		Spawned: subagent.Spawned(out.Entries, t.RunID, time.Now().UnixMilli())}, nil
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
	if why := m.models.Refuse(rs.Model, ""); why != "" {
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

// refuse ends a turn the runner never sees with an error result (the lane
// shows it in the run's error event); nothing is added to the transcript.
func refuse(kind, msg string) *lanes.Outcome {
	return &lanes.Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: msg, IsError: true}},
		Meta: events.Meta{Error: &events.RunError{Kind: kind, Message: msg}}}}
}
