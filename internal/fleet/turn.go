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
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/subagent"
	"github.com/lanefleet/lanefleet/tools"
)

// handle adapts a lane turn to the runner, registering the run in the
// active-run registry while it runs.
func (m *Member) handle(ctx context.Context, t *lanes.Turn) (*lanes.Outcome, error) {
	if t.Command != nil {
		return m.command(ctx, t)
	}
	if c, ok := subagent.StoppedChild(&t.State, t.Inbound); ok {
		// The completion of a child this session's stop was passed on
		// to: the session was stopped, so no model answers it; the lane
		// takes the child off and counts its use.
		return &lanes.Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: subagent.StoppedText(c)}}}}, nil
	}
	inbound, settings, from := runSettings(t)
	ag, why := m.agentOf(t.SessionKey)
	if why != "" {
		// Refused like a model the fleet does not run: the sender is
		// told at once, and the message is not kept (re-running it
		// cannot succeed until an operator defines the agent; the
		// sender who was told resends).
		return refuse(events.KindInvalidInput, why), nil
	}
	if ag != nil {
		if inbound, why = m.applyAgent(ag, inbound, &settings, &from); why != "" {
			return refuse(events.KindInvalidInput, why), nil
		}
	}
	if ref := inbound.Model; ref != "" {
		if why := m.models.Refuse(ref, from); why != "" {
			return refuse(events.KindInvalidInput, why), nil
		}
	}
	if why := m.clientToolClash(inbound.Tools); why != "" {
		return refuse(events.KindInvalidInput, why), nil
	}
	if settings.AuthProfileLocked {
		store, _ := fleetAuth{s: m.Auth, creds: m.creds}.Snapshot()
		if pe, ok := errors.AsType[*authprofile.PinError](m.pins.Check(store, settings.AuthProfile, time.Now())); ok {
			where := ""
			if t.Inbound.AuthProfile == "" {
				where = " (the session's setting)"
			}
			return refuse(events.KindInvalidInput, fmt.Sprintf("auth profile %q%s %s", pe.ID, where, pe.Reason)), nil
		}
	}
	if ag != nil {
		ta, writeBack, err := m.seedAgent(ctx, t, ag)
		if err != nil {
			return nil, fmt.Errorf("fleet: agent %s: workspace: %w", ag.ID, err)
		}
		defer writeBack()
		ctx = withAgent(ctx, ta)
	}
	reg := m.register(ctx, t)
	defer reg.clear(ctx)
	mk, steer := turnMasker(m.cfg.Redactor, t, inbound)
	ctx = withMasker(ctx, mk)
	in := runner.Input{SessionKey: t.SessionKey, SessionID: t.SessionID, RunID: t.RunID,
		Attempt: t.Attempt, Inbound: inbound, History: t.History, Steer: steer, Settings: settings, Approvals: t.State.Approvals,
		Lineage: subagent.Lineage(parentOf(t)),
		// The lane's transcript only grows in place; any other change
		// to it is a new array (lanes.Turn.History).
		HistoryAppendOnly: true}
	if steps := t.Steps(); steps != nil && !m.cfg.NoStepJournal {
		in.Steps = steps
	}
	out, err := m.Runner.Run(ctx, in, observeSink(ctx, phaseSink{Sink: shown(t), reg: reg}))
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
