package fleet

import (
	"context"

	"github.com/lanefleet/lanefleet/chatcmd"
	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/sessionfile"
	"github.com/lanefleet/lanefleet/subagent"
)

// command answers a chat command the lane handed to the handler
// (lanes.Turn.Command): a turn with no model call and a reply (which the
// lane shows in the run's lifecycle end event too), committed like any
// turn. /new and /reset start the transcript
// anew (lanes.Outcome.Reset, in the same fenced write as the turn), and
// the text after them runs as the new transcript's first message, through
// the model like any message. The settings commands with an argument never
// reach here: the lane stores them as settings messages.
func (m *Member) command(ctx context.Context, t *lanes.Turn) (*lanes.Outcome, error) {
	c := t.Command
	if c.Err != nil {
		return refuse(events.KindInvalidInput, c.Err.Error()), nil
	}
	switch c.Name {
	case chatcmd.New, chatcmd.Reset:
		m.endSession(t.SessionKey) // its background processes go with the transcript
		if c.Args == "" {
			out := reply("New session started: the transcript is empty; settings are kept.")
			out.Reset = true
			return out, nil
		}
		first := *t
		in := *t.Inbound
		in.Text = c.Args
		first.Inbound, first.History, first.Command = &in, nil, nil
		// The calls waiting for approval and the sticky auth profile go
		// with the transcript (lanes.Outcome.Reset).
		first.State.Approvals, first.State.AuthProfile = nil, ""
		out, err := m.handle(ctx, &first)
		if out != nil {
			out.Reset = true
		}
		return out, err
	case chatcmd.Help:
		return reply(chatcmd.HelpText()), nil
	case chatcmd.Status:
		return reply(chatcmd.StatusText(m.status(t))), nil
	case chatcmd.Compact:
		return m.compactNow(ctx, t)
	}
	// /model, /think, /verbose, /reasoning, /queue without an argument:
	// what the session has.
	return reply(c.Reply(storedSettings(t), m.sessionDefaults(t.SessionKey))), nil
}

// sessionDefaults are the defaults a session's command replies name: its
// agent's model and thinking level where it sets them, else the worker's.
func (m *Member) sessionDefaults(key string) chatcmd.Defaults {
	d := m.chatDefaults()
	if a, _ := m.agentOf(key); a != nil {
		if a.Model != "" {
			d.Model, d.AgentModel = a.Model, true
		}
		if a.Thinking != "" {
			d.Thinking, d.AgentThinking = a.Thinking, true
		}
	}
	return d
}

// chatDefaults are the worker's defaults the command replies name.
func (m *Member) chatDefaults() chatcmd.Defaults {
	return chatcmd.Defaults{Model: m.defaultModel}
}

// storedSettings puts a turn's settings back together as the lane stores
// them.
func storedSettings(t *lanes.Turn) *events.Settings {
	s := &events.Settings{Run: t.Settings}
	if t.Queue != nil {
		s.QueueSettings = *t.Queue
	}
	return s
}

// status is what /status reports of the session, from what the turn
// carries: its stored settings and state, its transcript.
func (m *Member) status(t *lanes.Turn) chatcmd.StatusInfo {
	in := chatcmd.StatusInfo{Settings: storedSettings(t), Defaults: m.sessionDefaults(t.SessionKey), AuthProfile: t.State.AuthProfile,
		Entries: len(t.History), State: t.State}
	in.ContextTokens = compaction.ContextTokens(sessionfile.MessagesShared(t.History))
	ref := in.Defaults.Model
	if t.Settings != nil && t.Settings.Model != "" {
		ref = t.Settings.Model
	}
	if m.resolver != nil && ref != "" {
		if model, _, err := m.resolver.Resolve(ref); err == nil {
			in.ContextWindow = model.ContextWindow
		}
	}
	return in
}

// reply ends a command's turn with its reply: a result whose payload is
// the text, which the lane's lifecycle end event carries too. Nothing is
// added to the transcript.
func reply(text string) *lanes.Outcome {
	return &lanes.Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: text}}}, EndText: text}
}

// compactNow answers /compact: the runner compacts the transcript on the
// session's model (its settings resolved as a turn's), and the compaction
// entry is the turn's.
func (m *Member) compactNow(ctx context.Context, t *lanes.Turn) (*lanes.Outcome, error) {
	inbound, settings, _ := runSettings(t)
	in := runner.Input{SessionKey: t.SessionKey, SessionID: t.SessionID, RunID: t.RunID, Attempt: t.Attempt,
		Inbound: inbound, History: t.History, Settings: settings, Lineage: subagent.Lineage(parentOf(t))}
	out, err := m.Runner.Compact(ctx, in, t.Command.Args, t)
	if err != nil {
		return nil, err
	}
	return &lanes.Outcome{Entries: out.Entries, Result: out.Result, AuthProfile: out.AuthProfile, EndText: out.EndText}, nil
}

// shown is the sink of a turn's events as the session's /verbose and
// /reasoning settings want them: verbose off leaves the tool events out,
// reasoning off the thinking events. The runner and the final result are
// unchanged.
func shown(t *lanes.Turn) runner.Sink {
	s := t.Settings
	if s == nil || (s.Verbose != "off" && s.Reasoning != "off") {
		return t
	}
	return hiddenSink{Sink: t, tools: s.Verbose == "off", thinking: s.Reasoning == "off"}
}

type hiddenSink struct {
	runner.Sink
	tools, thinking bool
}

func (h hiddenSink) Emit(stream string, data events.EventData) {
	if (h.tools && stream == events.StreamTool) || (h.thinking && stream == events.StreamThinking) {
		return
	}
	h.Sink.Emit(stream, data)
}
