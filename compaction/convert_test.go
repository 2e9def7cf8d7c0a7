package compaction

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

func TestConvertToLLMBash(t *testing.T) {
	t.Parallel()
	bash := func(extra map[string]any) message.Message {
		extra["command"] = "make test"
		return message.Message{Role: RoleBashExecution, Extra: extra, Timestamp: 7}
	}
	tests := []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"success", map[string]any{"output": "ok", "exitCode": int64(0)}, "Ran `make test`\n```\nok\n```"},
		{"no output", map[string]any{"output": "", "exitCode": int64(0)}, "Ran `make test`\n(no output)"},
		{"failure", map[string]any{"output": "boom", "exitCode": int64(2)}, "Ran `make test`\n```\nboom\n```\n\nCommand exited with code 2"},
		// A cancelled command has no meaningful exit code.
		{"cancelled", map[string]any{"output": "x", "exitCode": int64(130), "cancelled": true}, "Ran `make test`\n```\nx\n```\n\n(command cancelled)"},
		{"exit code unknown", map[string]any{"output": "x", "exitCode": nil}, "Ran `make test`\n```\nx\n```"},
		{"truncated", map[string]any{"output": "x", "exitCode": int64(0), "truncated": true, "fullOutputPath": "/tmp/out.log"},
			"Ran `make test`\n```\nx\n```\n\n[Output truncated. Full output: /tmp/out.log]"},
		// Without a path there is nothing to point at.
		{"truncated without path", map[string]any{"output": "x", "truncated": true}, "Ran `make test`\n```\nx\n```"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ConvertToLLM([]message.Message{bash(tt.extra)})
			if len(got) != 1 || got[0].Role != message.RoleUser || got[0].Timestamp != 7 {
				t.Fatalf("got %+v", got)
			}
			if s := got[0].Content.Text(); s != tt.want {
				t.Errorf("text = %q, want %q", s, tt.want)
			}
		})
	}
}

func TestConvertToLLMDrops(t *testing.T) {
	t.Parallel()
	in := []message.Message{
		// "!!command" runs stay out of the model's context.
		{Role: RoleBashExecution, Extra: map[string]any{"command": "ls", "output": "", "excludeFromContext": true}},
		// Roles convertToLlm does not know are dropped.
		{Role: "hookMessage", Extra: map[string]any{"content": "old"}},
		message.User("kept", 1),
	}
	got := ConvertToLLM(in)
	if len(got) != 1 || got[0].Content.Text() != "kept" {
		t.Errorf("got %+v", got)
	}
	if again := ConvertToLLM(got); len(again) != 1 || again[0].Content.Text() != "kept" {
		t.Errorf("not idempotent: %+v", again)
	}
}

// TestConvertToLLMContext converts the context sessionfile builds for a
// session with a compaction, a branch summary and a custom message.
func TestConvertToLLMContext(t *testing.T) {
	t.Parallel()
	var h hist
	h.user("old")
	first := h.user("kept question")
	h.compaction("## Goal\nShip it.", first, nil)
	h.add(message.Entry{Type: message.EntryBranchSummary, Fields: map[string]any{"fromId": "e01", "summary": "Tried another approach."}})
	h.add(message.Entry{Type: message.EntryCustomMessage, Fields: map[string]any{"customType": "note", "display": false,
		"content": []any{map[string]any{"type": "text", "text": "see image"}, map[string]any{"type": "image", "data": "iVBO", "mimeType": "image/png"}}}})
	h.asst("answer")
	var b strings.Builder
	for _, m := range ConvertToLLM(sessionfile.Messages(h.entries)) {
		fmt.Fprintf(&b, "== %s %d\n", m.Role, m.Timestamp)
		for _, bl := range m.Content.Blocks {
			if bl.Type == message.BlockText {
				fmt.Fprintf(&b, "%s\n", bl.Text)
			} else {
				fmt.Fprintf(&b, "[%s %s]\n", bl.Type, bl.MimeType)
			}
		}
	}
	golden(t, "convert.golden", b.String())
}

func readFixture(t testing.TB) []message.Entry {
	t.Helper()
	f, err := os.Open("testdata/session.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := sessionfile.ReadEntries(f)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}
