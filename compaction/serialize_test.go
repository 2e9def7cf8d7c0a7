package compaction

import (
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

func TestSerializeGolden(t *testing.T) {
	t.Parallel()
	golden(t, "serialize.golden", Serialize(sessionfile.Messages(readFixture(t)))+"\n")
}

// TestSerializePiVector checks the vector pi 0.85.1's serializeConversation
// produced under node (the edit call's keys listed in sorted order: a Go
// map keeps no other).
func TestSerializePiVector(t *testing.T) {
	t.Parallel()
	msgs := []message.Message{
		message.User("Fix the tests.", 0),
		{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text("NOTE: x"),
			message.ToolCall("c1", "bash", map[string]any{"command": "pytest -q", "timeout": int64(30)}))},
		{Role: message.RoleToolResult, ToolCallID: "c1", ToolName: "bash", IsError: true,
			Content: message.BlocksOf(message.Text(strings.Repeat("L", 2500) + "é"))},
		{Role: message.RoleAssistant, Content: message.BlocksOf(
			message.ToolCall("c2", "edit", map[string]any{"new": `x = "2" é`, "old": "x = 1", "path": "a.py"}))},
		{Role: message.RoleToolResult, ToolCallID: "c2", ToolName: "edit", Content: message.BlocksOf(message.Text("ok"))},
	}
	want := "<conversation>\n" +
		"[User]: Fix the tests.\n\n[Assistant]: NOTE: x\n\n[Assistant tool calls]: bash(command=\"pytest -q\", timeout=30)\n\n" +
		"[Tool result]: " + strings.Repeat("L", 2000) + "\n\n[... 501 more characters truncated]\n\n" +
		"[Assistant tool calls]: edit(new=\"x = \\\"2\\\" é\", old=\"x = 1\", path=\"a.py\")\n\n[Tool result]: ok" +
		"\n</conversation>"
	if got := Serialize(msgs); got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}

func TestSerializeEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		msgs []message.Message
		want string
	}{
		{"nothing", nil, ""},
		// Messages without text leave no paragraph.
		{"empty messages", []message.Message{
			message.User("", 0),
			{Role: message.RoleUser, Content: message.BlocksOf(message.Image("image/png", "x"))},
			{Role: message.RoleAssistant},
			{Role: message.RoleToolResult, Content: message.BlocksOf(message.Image("image/png", "x"))},
		}, ""},
		// Text blocks of a user or tool result join without separator;
		// an assistant's join with newlines, thinking first, calls last.
		{"joins", []message.Message{
			{Role: message.RoleUser, Content: message.BlocksOf(message.Text("a"), message.Text("b"))},
			{Role: message.RoleAssistant, Content: message.BlocksOf(
				message.ToolCall("1", "ls", nil), message.Text("t1"), message.Thinking("h1", ""),
				message.Text("t2"), message.Thinking("h2", ""), message.ToolCall("2", "pwd", map[string]any{}))},
		}, "[User]: ab\n\n[Assistant thinking]: h1\nh2\n\n[Assistant]: t1\nt2\n\n[Assistant tool calls]: ls(); pwd()"},
		// The cap counts UTF-16 code units and never splits a character.
		{"astral truncation", []message.Message{
			{Role: message.RoleToolResult, Content: message.BlocksOf(message.Text(strings.Repeat("a", 1999) + "😀😀"))},
		}, "[Tool result]: " + strings.Repeat("a", 1999) + "\n\n[... 3 more characters truncated]"},
		{"exactly at the cap", []message.Message{
			{Role: message.RoleToolResult, Content: message.BlocksOf(message.Text(strings.Repeat("a", 2000)))},
		}, "[Tool result]: " + strings.Repeat("a", 2000)},
		// Summaries are converted first.
		{"converted", []message.Message{
			{Role: sessionfile.RoleBranchSummary, Extra: map[string]any{"summary": "s"}},
		}, "[User]: " + branchSummaryPrefix + "s" + branchSummarySuffix},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := "<conversation>\n" + tt.want + "\n</conversation>"
			if got := Serialize(tt.msgs); got != want {
				t.Errorf("got\n%q\nwant\n%q", got, want)
			}
		})
	}
}
