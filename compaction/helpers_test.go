package compaction

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it)\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

// tok returns text that estimates to exactly n tokens.
func tok(n int) string { return strings.Repeat("abcd", n) }

// hist builds a linear session: every entry's parent is the one before.
type hist struct{ entries []message.Entry }

func (h *hist) add(e message.Entry) string {
	if e.ID == "" {
		e.ID = fmt.Sprintf("e%02d", len(h.entries)+1)
	}
	if e.Timestamp == "" {
		e.Timestamp = fmt.Sprintf("2026-03-15T10:%02d:00.000Z", len(h.entries)%60)
	}
	if n := len(h.entries); n > 0 && e.ParentID == nil {
		p := h.entries[n-1].ID
		e.ParentID = &p
	}
	h.entries = append(h.entries, e)
	return e.ID
}

func (h *hist) msg(m message.Message) string {
	return h.add(message.Entry{Type: message.EntryMessage, Message: &m})
}

func (h *hist) user(text string) string { return h.msg(message.User(text, 1773570000000)) }

func (h *hist) asst(text string, calls ...message.Block) string {
	var blocks []message.Block
	if text != "" {
		blocks = append(blocks, message.Text(text))
	}
	blocks = append(blocks, calls...)
	stop := message.StopStop
	if len(calls) > 0 {
		stop = message.StopToolUse
	}
	return h.msg(message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(blocks...), StopReason: stop,
		API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-6", Timestamp: 1773570000000})
}

func (h *hist) result(callID, name, text string) string {
	return h.msg(message.Message{Role: message.RoleToolResult, ToolCallID: callID, ToolName: name,
		Content: message.BlocksOf(message.Text(text)), Timestamp: 1773570000000})
}

func (h *hist) setting() string {
	return h.add(message.Entry{Type: message.EntryModelChange, Fields: map[string]any{"provider": "anthropic", "modelId": "claude-sonnet-4-6"}})
}

func (h *hist) customMessage(text string) string {
	return h.add(message.Entry{Type: message.EntryCustomMessage, Fields: map[string]any{"customType": "note", "content": text, "display": true}})
}

func (h *hist) compaction(summary, firstKept string, details map[string]any) string {
	f := map[string]any{"summary": summary, "firstKeptEntryId": firstKept, "tokensBefore": int64(1000)}
	if details != nil {
		f["details"] = details
	}
	return h.add(message.Entry{Type: message.EntryCompaction, Fields: f})
}

func call(id, name string, args map[string]any) message.Block {
	return message.ToolCall(id, name, args)
}

func ids(entries []message.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}
