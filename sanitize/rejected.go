package sanitize

import (
	"encoding/json"
	"fmt"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// TrimCallNames trims the white space around the tool names of a model's
// reply in place, so its calls dispatch by exact name (the reference trims
// streamed tool-call names, runtime spec §4 step 6: " read" is read). It
// reports whether a name changed.
func TrimCallNames(m *message.Message) bool {
	changed := false
	for i := range m.Content.Blocks {
		b := &m.Content.Blocks[i]
		if !IsToolCall(b) {
			continue
		}
		if name, ok := callName(b); ok {
			if t := ecmatext.Trim(name); t != name {
				setCallName(b, t)
				changed = true
			}
		}
	}
	return changed
}

// Bounds of a rejected call's note (in UTF-16 units, as ecmatext counts).
const (
	noteNameMax   = 64
	noteArgsMax   = 500
	noteResultMax = 2000
)

// NoteRejectedCalls replaces each tool call a provider would refuse with a
// text note in its place, and drops the call's result: the model then sees
// what it called and what came of it on its next request, instead of
// losing both (a model that does not see a failed call makes it again, up
// to the tool-loop limit). A provider refuses what RepairToolCallInputs
// drops without an allowlist: a call without arguments, with a blank id,
// or whose name is not 1-64 of A-Z a-z 0-9 _ - once trimmed. A call of a
// tool that is merely not offered is well formed and stays a call. The
// result is the first one after the call (before the next assistant
// message) with the call's id.
//
// msgs is not modified; when no call is refused msgs itself is returned.
// Run it before Prepare, whose malformed-call repair would drop the calls
// without a trace.
func NoteRejectedCalls(msgs []message.Message) []message.Message {
	var out []message.Message
	drop := map[int]bool{} // indexes of the results folded into notes
	for i := range msgs {
		m := &msgs[i]
		if m.Role != message.RoleAssistant || !hasRejectedCall(m) {
			if out != nil && !drop[i] {
				out = append(out, *m)
			}
			continue
		}
		if out == nil {
			out = make([]message.Message, 0, len(msgs))
			for j := range i {
				if !drop[j] {
					out = append(out, msgs[j])
				}
			}
		}
		nm := *m
		nm.Content.Blocks = make([]message.Block, len(m.Content.Blocks))
		for j := range m.Content.Blocks {
			b := &m.Content.Blocks[j]
			why := rejected(b)
			if why == "" {
				nm.Content.Blocks[j] = *b
				continue
			}
			result := "none"
			if k := resultOf(msgs, i, b, drop); k >= 0 {
				drop[k] = true
				result = clip(msgs[k].Content.Text(), noteResultMax)
			}
			nm.Content.Blocks[j] = message.Text(rejectedNote(b, why, result))
		}
		nm.Content.SetPlain(false)
		out = append(out, nm)
	}
	if out == nil {
		return msgs
	}
	return out
}

// hasRejectedCall reports whether m holds a call a provider would refuse.
func hasRejectedCall(m *message.Message) bool {
	for j := range m.Content.Blocks {
		if rejected(&m.Content.Blocks[j]) != "" {
			return true
		}
	}
	return false
}

// rejected says why a provider would refuse a block, "" when it would not
// (or it is no tool call).
func rejected(b *message.Block) string {
	if !IsToolCall(b) {
		return ""
	}
	if keep, _ := checkCall(b, nil); keep {
		return ""
	}
	switch id, ok := callID(b); {
	case !hasCallInput(b):
		return "it has no arguments"
	case !ok || ecmatext.Trim(id) == "":
		return "it has no call id"
	}
	return "its name is not a tool name (1-64 of A-Z a-z 0-9 _ -)"
}

// resultOf returns the index of the result of the call b of msgs[i]: the
// first tool result after it, before the next assistant message, with the
// call's id and not taken yet; -1 when there is none.
func resultOf(msgs []message.Message, i int, b *message.Block, taken map[int]bool) int {
	id, _ := callID(b)
	for k := i + 1; k < len(msgs) && msgs[k].Role != message.RoleAssistant; k++ {
		if msgs[k].Role == message.RoleToolResult && !taken[k] && resultID(&msgs[k]) == id {
			return k
		}
	}
	return -1
}

// rejectedNote is the text that stands for a refused call: what was
// called, with which arguments, why it is not shown as a call, and its
// result.
func rejectedNote(b *message.Block, why, result string) string {
	name, _ := callName(b)
	args := b.Arguments
	if b.Type != message.BlockToolCall {
		if a, ok := b.Extra["arguments"].(map[string]any); ok {
			args = a
		} else if a, ok := b.Extra["input"].(map[string]any); ok {
			args = a
		}
	}
	raw, err := json.Marshal(args)
	if err != nil || args == nil {
		raw = []byte("{}")
	}
	return fmt.Sprintf("[Tool call %q with arguments %s, shown as this note because %s. Its result: %s]",
		clip(name, noteNameMax), clip(string(raw), noteArgsMax), why, result)
}

// clip bounds s to n UTF-16 units, marking a cut with "…".
func clip(s string, n int) string {
	if ecmatext.Len(s) <= n {
		return s
	}
	return ecmatext.Prefix(s, n) + "…"
}
