package message

import (
	"strings"
	"testing"
)

// TestEntryBytes: an entry's estimate grows with what it holds — texts,
// tool-call arguments, details, unknown fields — and a hostile value
// nested without end costs a bounded walk.
func TestEntryBytes(t *testing.T) {
	t.Parallel()
	msg := func(m Message) *Entry { return &Entry{Type: EntryMessage, ID: "id", Message: &m} }
	deep := map[string]any{}
	for cur, i := deep, 0; i < 10000; i++ {
		next := map[string]any{}
		cur["k"] = next
		cur = next
	}
	for _, tc := range []struct {
		name string
		e    *Entry
		min  int // at least what it holds
	}{
		{"text", msg(User(strings.Repeat("x", 10000), 1)), 10000},
		{"tool call arguments", msg(Message{Role: RoleAssistant, Content: Content{Blocks: []Block{ToolCall("c", "write", map[string]any{"content": strings.Repeat("y", 5000)})}}}), 5000},
		{"details", msg(Message{Role: RoleToolResult, Details: map[string]any{"diff": []any{strings.Repeat("z", 3000)}}}), 3000},
		{"unknown fields", &Entry{Type: EntryCustom, ID: "id", Fields: map[string]any{"data": strings.Repeat("w", 2000)}}, 2000},
		{"nested without end", &Entry{Type: EntryCustom, ID: "id", Fields: deep}, maxDepth * mapSlot},
	} {
		if got := tc.e.Bytes(); got < tc.min {
			t.Errorf("%s: %d bytes, want at least %d", tc.name, got, tc.min)
		}
	}
	a, b := msg(User("a", 1)), msg(User("bb", 1))
	if got, want := EntriesBytes([]Entry{*a, *b}), a.Bytes()+b.Bytes(); got != want || b.Bytes() != a.Bytes()+1 {
		t.Errorf("EntriesBytes = %d, want the sum %d (%d + %d)", got, want, a.Bytes(), b.Bytes())
	}
}
