package chatcmd

import (
	"fmt"
	"strings"

	"github.com/lanefleet/lanefleet/events"
)

// usage is each command's synopsis, as /help lists them.
var usage = map[Name]string{
	New:       "/new [first message]",
	Reset:     "/reset [first message]",
	Compact:   "/compact [focus]",
	Model:     "/model [provider/model]",
	Think:     "/think [off|minimal|low|medium|high|xhigh]",
	Verbose:   "/verbose [on|off]",
	Reasoning: "/reasoning [on|off|stream]",
	Queue:     "/queue [mode] [debounce:2s] [cap:20] [drop:old|new|summarize] | /queue reset",
	Stop:      "/stop",
	Status:    "/status",
	Help:      "/help",
}

// order is the order /help lists the commands in.
var order = []struct {
	name Name
	what string
}{
	{New, "start a fresh transcript (settings kept); the text after it is the first message"},
	{Reset, "the same as /new"},
	{Compact, "summarize the transcript now, with an optional focus for the summary"},
	{Model, "show or set the session's model"},
	{Think, "show or set the thinking level"},
	{Verbose, "show or set whether tool events are published"},
	{Reasoning, "show or set whether thinking events are published"},
	{Queue, "show or set the queue mode and its options"},
	{Stop, "stop the running turn and drop what is queued before this"},
	{Status, "model, auth profile, context use, running cost, queue settings"},
	{Help, "this list"},
}

// HelpText is /help's reply.
func HelpText() string {
	var b strings.Builder
	b.WriteString("Commands (a message that is only the command; nothing is sent to the model):")
	for _, c := range order {
		fmt.Fprintf(&b, "\n%s — %s", usage[c.name], c.what)
	}
	return b.String()
}

// Reply is the reply of a command that stores or shows settings (/model,
// /think, /verbose, /reasoning, /queue), given the session's settings
// after the command (nil = none stored) and the defaults (its agent's or
// the worker's) for what the session does not set.
func (c *Command) Reply(s *events.Settings, def Defaults) string {
	if c.Err != nil {
		return c.Err.Error()
	}
	var run *events.RunSettings
	var q *events.QueueSettings
	if s != nil {
		run, q = s.RunSettings(), s.Queue()
	}
	if run == nil {
		run = &events.RunSettings{}
	}
	verb := "is"
	if c.IsChange() {
		verb = "set to"
	}
	switch c.Name {
	case Model:
		if run.Model == "" {
			return fmt.Sprintf("Model: %s (%s default).", orNone(def.Model), whose(def.AgentModel))
		}
		return fmt.Sprintf("Model %s %s.", verb, run.Model)
	case Think:
		if run.Thinking == "" {
			return fmt.Sprintf("Thinking level: %s (%s default).", orNone(def.Thinking), whose(def.AgentThinking))
		}
		return fmt.Sprintf("Thinking level %s %s.", verb, run.Thinking)
	case Verbose:
		return fmt.Sprintf("Verbose %s %s.", verb, or(run.Verbose, "on"))
	case Reasoning:
		return fmt.Sprintf("Reasoning %s %s.", verb, or(run.Reasoning, "stream"))
	case Queue:
		if verb == "is" {
			verb = "are"
		}
		return fmt.Sprintf("Queue settings %s %s.", verb, q.String())
	}
	return ""
}

// Defaults are the settings a session falls back to: its agent's where
// the agent sets them, else the worker's.
type Defaults struct {
	Model    string // "provider/model-id"
	Thinking string
	// AgentModel and AgentThinking say Model and Thinking are the
	// session's agent's, not the worker's.
	AgentModel, AgentThinking bool
}

// whose names where a default comes from: the session's agent or the
// worker.
func whose(agent bool) string {
	if agent {
		return "the agent's"
	}
	return "the worker's"
}

// StatusInfo is what /status reports.
type StatusInfo struct {
	Settings      *events.Settings // the session's stored settings (nil = none)
	Defaults      Defaults
	AuthProfile   string // the sticky auth profile ("" = none yet)
	Entries       int    // transcript entries
	ContextTokens int    // the transcript's estimated tokens
	ContextWindow int    // the model's context window (0 = not known)
	State         events.SessionState
}

// StatusText is /status's reply.
func StatusText(in StatusInfo) string {
	var run *events.RunSettings
	var q *events.QueueSettings
	if in.Settings != nil {
		run, q = in.Settings.RunSettings(), in.Settings.Queue()
	}
	if run == nil {
		run = &events.RunSettings{}
	}
	var b strings.Builder
	model := run.Model
	if model == "" {
		model = orNone(in.Defaults.Model) + " (default)"
	}
	fmt.Fprintf(&b, "Model: %s", model)
	thinking := run.Thinking
	if thinking == "" {
		thinking = orNone(in.Defaults.Thinking) + " (default)"
	}
	fmt.Fprintf(&b, "\nThinking: %s; verbose %s; reasoning %s", thinking, or(run.Verbose, "on"), or(run.Reasoning, "stream"))
	profile := orNone(in.AuthProfile)
	if run.AuthProfile != "" {
		profile = run.AuthProfile + " (pinned)"
	}
	fmt.Fprintf(&b, "\nAuth profile: %s", profile)
	if in.ContextWindow > 0 {
		fmt.Fprintf(&b, "\nContext: ~%d of %d tokens (%d%%), %d entries", in.ContextTokens, in.ContextWindow,
			int(int64(in.ContextTokens)*100/int64(in.ContextWindow)), in.Entries)
	} else {
		fmt.Fprintf(&b, "\nContext: ~%d tokens, %d entries", in.ContextTokens, in.Entries)
	}
	cost := 0.0
	var tokens int64
	if u := in.State.Usage; u != nil {
		tokens = u.Total
		if u.Cost != nil {
			cost = u.Cost.Total
		}
	}
	fmt.Fprintf(&b, "\nRunning cost: $%.4f over %d turns (%d tokens)", cost, in.State.Turns, tokens)
	fmt.Fprintf(&b, "\nQueue: %s", q.String())
	return b.String()
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orNone(s string) string { return or(s, "none") }
