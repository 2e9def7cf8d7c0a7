package sanitize

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

func TestNoteRejectedCalls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		same           bool // msgs itself comes back
	}{
		{
			// The reported loop: a call the provider refuses and its
			// "not found" result become a note the model reads.
			name: "a name a provider refuses",
			in: `[{"role":"user","content":"open it"},
				{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"browser.tabs.open","arguments":{"url":"x"}}],"stopReason":"toolUse"},
				{"role":"toolResult","toolCallId":"c1","toolName":"browser.tabs.open","content":[{"type":"text","text":"Tool browser.tabs.open not found"}],"isError":true},
				{"role":"user","content":"well?"}]`,
			want: `[{"role":"user","content":"open it"},
				{"role":"assistant","content":[{"type":"text","text":"[Tool call \"browser.tabs.open\" with arguments {\"url\":\"x\"}, shown as this note because its name is not a tool name (1-64 of A-Z a-z 0-9 _ -). Its result: Tool browser.tabs.open not found]"}],"stopReason":"toolUse"},
				{"role":"user","content":"well?"}]`,
		},
		{
			// A tool that is not offered is well formed: the call and
			// its error stay as they are.
			name: "a tool not offered",
			in: `[{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"exec","arguments":{}}],"stopReason":"toolUse"},
				{"role":"toolResult","toolCallId":"c1","toolName":"exec","content":[{"type":"text","text":"Tool exec not found"}],"isError":true}]`,
			same: true,
		},
		{
			name: "a refused call beside a good one",
			in: `[{"role":"assistant","content":[{"type":"text","text":"two"},{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a"}},{"type":"toolCall","id":"c2","name":"a b","arguments":{}}],"stopReason":"toolUse"},
				{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"text","text":"A"}]},
				{"role":"toolResult","toolCallId":"c2","toolName":"a b","content":[{"type":"text","text":"Tool a b not found"}],"isError":true}]`,
			want: `[{"role":"assistant","content":[{"type":"text","text":"two"},{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a"}},{"type":"text","text":"[Tool call \"a b\" with arguments {}, shown as this note because its name is not a tool name (1-64 of A-Z a-z 0-9 _ -). Its result: Tool a b not found]"}],"stopReason":"toolUse"},
				{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"text","text":"A"}],"isError":false}]`,
		},
		{
			name: "no id, no result",
			in:   `[{"role":"assistant","content":[{"type":"toolCall","id":" ","name":"read","arguments":{}}],"stopReason":"toolUse"}]`,
			want: `[{"role":"assistant","content":[{"type":"text","text":"[Tool call \"read\" with arguments {}, shown as this note because it has no call id. Its result: none]"}],"stopReason":"toolUse"}]`,
		},
		{
			name: "no arguments",
			in:   `[{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read"}],"stopReason":"toolUse"}]`,
			want: `[{"role":"assistant","content":[{"type":"text","text":"[Tool call \"read\" with arguments {}, shown as this note because it has no arguments. Its result: none]"}],"stopReason":"toolUse"}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := parse(t, tt.in)
			before := canon(t, in)
			got := NoteRejectedCalls(in)
			if tt.same {
				if len(got) != len(in) || &got[0] != &in[0] {
					t.Fatalf("a transcript with nothing refused was copied: %+v", got)
				}
				return
			}
			checkJSON(t, got, tt.want)
			checkJSON(t, in, mustJSON(t, before)) // the input is left alone
		})
	}
}

// TestNoteRejectedCallsBounded: a note bounds the name, the arguments and
// the result it quotes.
func TestNoteRejectedCallsBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 5000)
	msgs := []message.Message{
		{Role: message.RoleAssistant, Content: message.BlocksOf(message.ToolCall("c1", long, map[string]any{"a": long}))},
		{Role: message.RoleToolResult, ToolCallID: "c1", Content: message.BlocksOf(message.Text(long))},
	}
	got := NoteRejectedCalls(msgs)
	if len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
	if n := len(got[0].Content.Text()); n > noteNameMax+noteArgsMax+noteResultMax+300 {
		t.Fatalf("note of %d bytes", n)
	}
}

func TestTrimCallNames(t *testing.T) {
	t.Parallel()
	m := message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text(" hi "),
		message.ToolCall("c1", " read", map[string]any{}), message.ToolCall("c2", "exec\n", nil), message.ToolCall("c3", "ls", nil))}
	if !TrimCallNames(&m) {
		t.Fatal("no name trimmed")
	}
	var names []string
	for _, c := range m.ToolCalls() {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "read,exec,ls" || m.Content.Blocks[0].Text != " hi " {
		t.Fatalf("names %q, text %q", names, m.Content.Blocks[0].Text)
	}
	if TrimCallNames(&m) {
		t.Fatal("trimmed names changed again")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
