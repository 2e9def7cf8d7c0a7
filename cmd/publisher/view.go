package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// view renders a run's events for a person. On a terminal the reply's text
// streams to out (stdout). Otherwise out gets the final reply alone, once the
// run ended, so `publisher send … > reply.txt` holds just the reply even
// after a hand-over (an aborted attempt, then a restart); the reply then
// streams live on notes if that is a terminal. Every other line goes to notes
// (stderr): reasoning, prefixed and dimmed, tool calls as "⚙ name(args…)"
// then "✓/✗ first line of the result", compaction, restarts, a provider
// retry's wait ("⏳ … retry 1 of 3 in 2s") and its end, a model attempt
// after a failover ("↻ retrying with openai/gpt-4o-mini (auth profile b)
// after rate_limit"), waits and errors. Colors are used only when notes is a terminal (and NO_COLOR is
// unset); otherwise it is plain text.
type view struct {
	out, notes *line
	live       *line // where the reply streams: out, notes or nowhere (nil)
	color      bool
	session    string
	thinking   bool   // inside a reasoning block
	printed    string // reply text of this attempt
}

// line tracks whether a writer's cursor is at the start of a line. When
// stdout and stderr are the same terminal they share one line.
type line struct {
	w       io.Writer
	atStart *bool
}

func (l *line) write(s string) {
	if s == "" {
		return
	}
	io.WriteString(l.w, s)
	*l.atStart = strings.HasSuffix(s, "\n")
}

// newline ends the current line, if one is open.
func (l *line) newline() {
	if !*l.atStart {
		l.write("\n")
	}
}

func newView(stdout, stderr io.Writer, session string) *view {
	outStart, notesStart := true, true
	v := &view{session: session, color: isTerminal(stderr) && os.Getenv("NO_COLOR") == ""}
	v.out = &line{w: stdout, atStart: &outStart}
	if isTerminal(stdout) && isTerminal(stderr) {
		v.notes = &line{w: stderr, atStart: &outStart}
	} else {
		v.notes = &line{w: stderr, atStart: &notesStart}
	}
	switch {
	case isTerminal(stdout):
		v.live = v.out
	case isTerminal(stderr):
		v.live = v.notes
	}
	return v
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ANSI styles.
const (
	dim   = "\x1b[2m"
	red   = "\x1b[31m"
	green = "\x1b[32m"
	bold  = "\x1b[1m"
	reset = "\x1b[0m"
)

func (v *view) style(code, s string) string {
	if !v.color {
		return s
	}
	return code + s + reset
}

// note writes one line to notes, on a line of its own.
func (v *view) note(format string, args ...any) {
	v.endThinking()
	v.notes.newline() // on a shared terminal this ends the reply's line too
	v.notes.write(fmt.Sprintf(format, args...) + "\n")
}

const thinkingPrefix = "┆ "

func (v *view) endThinking() {
	if v.thinking {
		v.thinking = false
		v.notes.newline()
	}
}

// event renders one event; it is called for every event but the final one.
func (v *view) event(ev *events.Event) {
	d := ev.Data
	switch ev.Stream {
	case events.StreamAssistant:
		v.endThinking()
		// Print only what is new, so repeated text is never printed twice.
		if d.Text != "" && strings.HasPrefix(d.Text, v.printed) {
			v.reply(d.Text[len(v.printed):])
		} else {
			v.reply(d.Delta)
		}
	case events.StreamThinking:
		v.reasoning(d.Delta)
	case events.StreamTool:
		v.tool(&d)
	case events.StreamCompaction:
		v.compaction(&d)
	case events.StreamAttempt:
		// The run's first attempt is what was asked for; a later one
		// says where the run went and why (never the provider's text:
		// the retrying line before it had that).
		if d.Reason == "" {
			break
		}
		with := d.Provider + "/" + d.Model
		if d.AuthProfile != "" {
			with += " (auth profile " + d.AuthProfile + ")"
		}
		v.note("%s", v.style(dim, "↻ retrying with "+with+" after "+d.Reason))
	case events.StreamLifecycle:
		v.lifecycle(&d)
	}
}

// tool shows a tool call's start, and its result's first line.
func (v *view) tool(d *events.EventData) {
	switch d.Phase {
	case events.PhaseStart:
		v.note("%s", v.style(bold, "⚙ "+d.Name+"("+clipArgs(d.Args, 80)+")"))
	case events.PhaseResult:
		mark, code := "✓", green
		if d.IsError {
			mark, code = "✗", red
		}
		v.note("  %s %s", v.style(code, mark), v.style(dim, firstLine(toolText(d.Payload), 120)))
	}
}

// compaction shows a compaction's start and end.
func (v *view) compaction(d *events.EventData) {
	switch d.Phase {
	case events.PhaseStart:
		v.note("%s", v.style(dim, "⟳ compacting the conversation…"))
	case events.PhaseEnd:
		msg := "⟳ compacted"
		if d.WillRetry {
			msg += "; retrying the request"
		}
		v.note("%s", v.style(dim, msg))
	}
}

// lifecycle shows what happened to the run: an aborted attempt, a restart
// on another worker, a steered message, a retry and its wait.
func (v *view) lifecycle(d *events.EventData) {
	switch d.Phase {
	case events.PhaseAborted:
		// The lanes word it "attempt N failed: <why>; it is retried"
		// or "attempt N did not finish: …".
		msg := d.Error
		if !strings.HasPrefix(msg, fmt.Sprintf("attempt %d ", d.Attempt)) {
			msg = fmt.Sprintf("attempt %d aborted: %s", d.Attempt, msg)
		}
		v.note("%s", v.style(red, "✗ "+msg))
	case events.PhaseRestart:
		v.note("%s", v.style(dim, fmt.Sprintf("↻ restarted on worker %s (attempt %d)", d.Worker, d.Attempt)))
		v.printed = ""
	case events.PhaseSteered:
		v.note("%s", v.style(dim, "↪ run "+d.Text+" saw this message while it ran; it runs on its own now"))
	case events.PhaseRetrying:
		wait := waitText(time.Duration(d.DelayMs) * time.Millisecond)
		why := firstLine(d.Error, 300)
		if d.Attempt == 0 {
			// A cooling auth profile's wait: the event says why.
			v.note("%s", v.style(dim, "⏳ "+why+"; calling the model in "+wait))
			break
		}
		v.note("%s", v.style(dim, fmt.Sprintf("⏳ the model call failed: %s; %s in %s", why, retryOf(*d), wait)))
	case events.PhaseWaiting:
		v.note("%s", v.style(dim, "⏳ "+firstLine(d.Text, 300)))
	case events.PhaseRetry:
		if d.Attempt == 0 {
			v.note("%s", v.style(dim, "↻ calling the model now"))
			break
		}
		v.note("%s", v.style(dim, "↻ "+retryOf(*d)+": calling the model again"))
	}
}

// wait says why following run shows no event: no worker runs, the
// message waits its turn, the run's worker stopped answering (and until
// when another takes it over), the connection to NATS dropped (why, and
// for how long nats.go tries to reconnect) or is back.
func (v *view) wait(run string, w lanefleet.Wait) {
	var msg string
	switch w.State {
	case lanefleet.RunNoWorker:
		msg = fmt.Sprintf("… no worker is running: run %s is stored and runs when one starts (waiting; Ctrl-C to stop)", run)
	case lanefleet.RunQueued:
		msg = fmt.Sprintf("… run %s waits on the session's lane for its turn", run)
	case lanefleet.RunHandOver:
		if w.Worker == "" {
			msg = fmt.Sprintf("… the worker running run %s stopped, and its lease on the session's lane lapsed: the run starts again when a worker takes the lane", run)
			break
		}
		msg = fmt.Sprintf("… worker %s stopped answering (it no longer renews its lease on the session's lane): another worker takes run %s over within %s",
			w.Worker, run, waitText(w.Within))
	case lanefleet.RunDisconnected:
		msg = "… lost the connection to NATS"
		if w.Err != nil {
			msg += " (" + firstLine(w.Err.Error(), 200) + ")"
		}
		if w.Within > 0 {
			msg += "; reconnecting, for at most " + waitText(w.Within.Round(time.Second))
		} else {
			msg += "; reconnecting"
		}
	case lanefleet.RunReconnected:
		msg = fmt.Sprintf("… reconnected to NATS; catching up on run %s", run)
	default:
		return
	}
	v.note("%s", v.style(dim, msg))
}

// retryOf names a same-key retry: "retry 2 of 3" ("retry 2" from a
// worker that does not say how many).
func retryOf(d events.EventData) string {
	if d.MaxAttempts > 0 {
		return fmt.Sprintf("retry %d of %d", d.Attempt, d.MaxAttempts)
	}
	return fmt.Sprintf("retry %d", d.Attempt)
}

// waitText words a wait for a person: "2s", "1.5s", "40ms", "2m0s".
func waitText(d time.Duration) string {
	if d >= time.Second {
		d = d.Round(100 * time.Millisecond)
	}
	return max(d, 0).String()
}

func (v *view) reply(s string) {
	if s == "" {
		return
	}
	if v.live != nil {
		v.live.write(s)
	}
	v.printed += s
}

func (v *view) reasoning(delta string) {
	if delta == "" {
		return
	}
	if !v.thinking {
		v.notes.newline()
		v.thinking = true
	}
	for i, part := range strings.Split(delta, "\n") {
		if i > 0 {
			v.notes.write("\n")
		}
		if part == "" {
			continue
		}
		if *v.notes.atStart {
			v.notes.write(v.style(dim, thinkingPrefix))
		}
		v.notes.write(v.style(dim, part))
	}
}

// final renders the final event and returns the run's error, if any.
func (v *view) final(res *events.Result) error {
	v.endThinking()
	if res.Meta.HeartbeatOK {
		// A heartbeat the model acknowledged (HEARTBEAT_OK): no reply, a
		// note on stderr.
		if v.live != nil {
			v.live.newline()
		}
		v.notes.write(v.style(dim, "heartbeat: nothing to report"))
		v.notes.newline()
		return nil
	}
	var texts []string
	for _, p := range res.Payloads {
		if !p.IsError && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	switch {
	case v.live == v.out && v.printed == "":
		v.out.write(strings.Join(texts, ""))
	case v.live != v.out:
		// The reply as the run ended it; what an aborted attempt streamed
		// is not part of it.
		if v.live != nil {
			v.live.newline()
		}
		text := strings.Join(texts, "\n")
		if text == "" {
			text = v.printed
		}
		v.out.write(text)
	}
	v.out.newline()
	v.pending(res.Meta.PendingToolCalls)
	if res.Meta.StopReason == events.StopYielded {
		v.out.write(yieldedStatus(res.Meta.Waiting) + "\n")
	}
	if e := res.Meta.Error; e != nil {
		v.note("%s", v.style(red, fmt.Sprintf("error (%s): %s", e.Kind, e.Message)))
		return errReported
	}
	return nil
}

// yieldedStatus is the line a turn that ended at sessions_yield shows.
func yieldedStatus(waiting int) string {
	switch waiting {
	case 0:
		return "⏸ yielded: no sub-agent is pending (nothing will arrive)"
	case 1:
		return "⏸ yielded: waiting for 1 sub-agent (its result arrives in this session as a message of its own)"
	}
	return fmt.Sprintf("⏸ yielded: waiting for %d sub-agents (each result arrives in this session as a message of its own)", waiting)
}

// pending lists the calls a run left waiting on stdout and says how to
// answer them: a client tool's call with its result (the client offers
// its tools again with --tool-file), a worker tool's call waiting for
// approval with approve or deny (no tool file: the tool is the worker's).
func (v *view) pending(calls []events.PendingCall) {
	var client, approve []events.PendingCall
	for _, c := range calls {
		if c.Approval {
			approve = append(approve, c)
		} else {
			client = append(client, c)
		}
	}
	list := func(head string, cs []events.PendingCall, answer string) []string {
		if len(cs) == 0 {
			return nil
		}
		v.out.write(head)
		var args []string
		for _, c := range cs {
			v.out.write(fmt.Sprintf("  %s  %s(%s)\n", c.ID, c.Name, clip(c.Arguments, 200)))
			args = append(args, "--tool-result "+shellQuote(c.ID+"="+answer))
		}
		return args
	}
	if args := list("⏸ waiting for client tool results:\n", client, "TEXT"); args != nil {
		v.note("answer with: publisher send --session %s --tool-file FILE %s", shellQuote(v.session), strings.Join(args, " "))
	}
	if args := list("⏸ waiting for approval:\n", approve, "approve"); args != nil {
		v.note("approve with: publisher send --session %s %s (or ID=deny to refuse)", shellQuote(v.session), strings.Join(args, " "))
	}
}

// toolText is the text of a tool result payload: a string, the text blocks
// of {content: [{type: text, text}]}, or else its JSON.
func toolText(p any) string {
	switch x := p.(type) {
	case nil:
		return ""
	case string:
		return x
	case map[string]any:
		if blocks, ok := x["content"].([]any); ok {
			var parts []string
			for _, b := range blocks {
				if m, ok := b.(map[string]any); ok {
					if t, ok := m["text"].(string); ok {
						parts = append(parts, t)
					} else if typ, ok := m["type"].(string); ok {
						parts = append(parts, "["+typ+"]")
					}
				}
			}
			return strings.Join(parts, " ")
		}
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// clipArgs renders tool arguments as compact JSON, at most n characters.
func clipArgs(args any, n int) string {
	if args == nil {
		return ""
	}
	var s string
	if str, ok := args.(string); ok {
		s = str
	} else {
		b, err := json.Marshal(args)
		if err != nil {
			return "…"
		}
		s = string(b)
	}
	return clip(s, n)
}

// firstLine returns the first non-empty line of s, at most n characters,
// with "…" when more was cut.
func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	first, rest, _ := strings.Cut(s, "\n")
	out := clip(strings.TrimSpace(first), n)
	if strings.TrimSpace(rest) != "" && !strings.HasSuffix(out, "…") {
		out += " …"
	}
	return out
}

// clip cuts s to n characters (runes), ending with "…" when cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '=' || r == ':' || r == '.' || r == '/' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
