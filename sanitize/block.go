package sanitize

import "github.com/lanefleet/lanefleet/message"

// Legacy block types that are tool calls too. Old transcripts (and some
// providers' raw blocks) use them; the message package keeps their fields in
// Extra.
const (
	blockToolUse      = "toolUse"
	blockFunctionCall = "functionCall"
)

// roleCompactionSummary is the pi role of the summary message injected after
// a compaction.
const roleCompactionSummary message.Role = "compactionSummary"

// IsToolCall reports whether b is a tool call: a toolCall block or one of the
// legacy toolUse / functionCall blocks.
func IsToolCall(b *message.Block) bool {
	return b.Type == message.BlockToolCall || b.Type == blockToolUse || b.Type == blockFunctionCall
}

// callID returns the id of a tool-call block and whether it is a string.
func callID(b *message.Block) (string, bool) {
	if b.Type == message.BlockToolCall {
		return b.ID, true
	}
	s, ok := b.Extra["id"].(string)
	return s, ok
}

// setCallID sets the id of a tool-call block that the caller owns. The Extra
// map of a legacy block is copied, never written in place.
func setCallID(b *message.Block, id string) {
	if b.Type == message.BlockToolCall {
		b.ID = id
		return
	}
	b.Extra = withField(b.Extra, "id", id)
}

// callName returns the name of a tool-call block and whether it is a string.
func callName(b *message.Block) (string, bool) {
	if b.Type == message.BlockToolCall {
		return b.Name, true
	}
	s, ok := b.Extra["name"].(string)
	return s, ok
}

func setCallName(b *message.Block, name string) {
	if b.Type == message.BlockToolCall {
		b.Name = name
		return
	}
	b.Extra = withField(b.Extra, "name", name)
}

// hasCallInput reports whether a tool-call block has arguments or input
// (absent and null count as missing; {} is fine).
func hasCallInput(b *message.Block) bool {
	if b.Type == message.BlockToolCall && b.Arguments != nil {
		return true
	}
	return b.Extra["arguments"] != nil || b.Extra["input"] != nil
}

// resultID returns the call id a tool result answers: toolCallId, else the
// legacy toolUseId.
func resultID(m *message.Message) string {
	if m.ToolCallID != "" {
		return m.ToolCallID
	}
	s, _ := m.Extra["toolUseId"].(string)
	return s
}

// withField returns a copy of m with k set to v.
func withField(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}

// withoutField returns a copy of m without k, or nil when nothing is left.
func withoutField(m map[string]any, k string) map[string]any {
	if len(m) <= 1 {
		if _, ok := m[k]; ok || len(m) == 0 {
			return nil
		}
	}
	out := make(map[string]any, len(m))
	for key, val := range m {
		if key != k {
			out[key] = val
		}
	}
	return out
}

// copyBlocks returns a copy of the block slice (blocks are shallow-copied;
// their maps stay shared until a field is set through withField).
func copyBlocks(b []message.Block) []message.Block {
	out := make([]message.Block, len(b))
	copy(out, b)
	return out
}
