package replytext

import (
	"strings"

	"github.com/lanefleet/lanefleet/internal/jstext"
	"github.com/lanefleet/lanefleet/message"
)

// Thinking returns the reasoning of an assistant message: its thinking
// blocks, each trimmed, the non-empty ones joined by newlines.
func Thinking(m *message.Message) string {
	if m == nil {
		return ""
	}
	var parts []string
	for _, b := range m.Content.Blocks {
		if b.Type != message.BlockThinking {
			continue
		}
		if t := jstext.Trim(b.Thinking); t != "" {
			parts = append(parts, t)
		}
	}
	return jstext.Trim(strings.Join(parts, "\n"))
}

// FormatReasoning formats reasoning for a reply or a thinking event:
// "Reasoning:" on its own line, then each non-empty line in underscores
// (italic in Markdown; one line at a time because some channels cannot
// italicise across lines). Blank reasoning gives "".
func FormatReasoning(text string) string {
	t := jstext.Trim(text)
	if t == "" {
		return ""
	}
	lines := strings.Split(t, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "_" + l + "_"
		}
	}
	return "Reasoning:\n" + strings.Join(lines, "\n")
}

// ToolErrors tracks the last failing tool of a run, as BuildPayloads wants
// it. A failure of a non-mutating tool is forgotten after the next
// successful tool; a failure of a mutating tool stays until that same
// action (same key) succeeds.
type ToolErrors struct {
	last *ToolError
	key  string
}

// Record notes the end of one tool execution: te describes the tool (its
// Error normalised by ToolErrorMessage when it failed), actionKey
// identifies the action for mutating tools (e.g. the tool name and target
// path).
func (t *ToolErrors) Record(te ToolError, actionKey string, failed bool) {
	if failed {
		c := te
		t.last, t.key = &c, actionKey
		return
	}
	if t.last == nil {
		return
	}
	if !t.last.Mutating || t.key == actionKey {
		t.last, t.key = nil, ""
	}
}

// Last returns the tool error to report, or nil.
func (t *ToolErrors) Last() *ToolError {
	if t.last == nil {
		return nil
	}
	c := *t.last
	return &c
}

// Reset forgets everything (a compaction retry restarts the run's
// accumulators).
func (t *ToolErrors) Reset() { t.last, t.key = nil, "" }

// ReasoningStream turns the growing reasoning of one assistant message into
// thinking events (reasoning mode "stream"): the formatted text and what it
// added since the last event.
type ReasoningStream struct {
	last string
}

// Update takes the reasoning so far and returns the event to publish, if the
// formatted text changed. When it does not extend the previous text (a
// rewrite), the whole text is the delta.
func (r *ReasoningStream) Update(reasoning string) (text, delta string, ok bool) {
	f := FormatReasoning(reasoning)
	if f == "" || f == r.last {
		return "", "", false
	}
	delta = f
	if strings.HasPrefix(f, r.last) {
		delta = f[len(r.last):]
	}
	r.last = f
	return f, delta, true
}

// Reset starts a new assistant message.
func (r *ReasoningStream) Reset() { r.last = "" }
