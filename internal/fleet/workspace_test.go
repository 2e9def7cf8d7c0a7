package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// TestEveryKeyHasAWorkspace: a turn with the built-in tools runs for every
// key the fleet accepts (docs/how-it-works.md, Subjects), up to 256 bytes, and writes into its session's
// own workspace. A key of 191 bytes or more was accepted, but its lane
// token named the workspace directory ("mkdir …: file name too long"):
// every message failed three times and was dead-lettered. A short key
// keeps the directory its token names, as before.
func TestEveryKeyHasAWorkspace(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := map[string]scripted.Script{"write": {Replies: []scripted.Reply{
		{ToolCalls: []scripted.ToolCall{{ID: "w1", Name: "write", Arguments: map[string]any{"path": "note.txt", "content": "hi"}}}},
		{Text: "written"},
	}}}
	_, c, ctx := runMember(t, Config{DataDir: t.TempDir(), WorkspaceRoot: root, DefaultModel: "scripted/write", Scripts: write})
	for _, key := range []string{
		"alice",                                  // its own token
		"agent:main:telegram:dm:42",              // an encoded token
		strings.Repeat("k", 190),                 // the longest token that is a file name
		strings.Repeat("k", 191),                 // the shortest that is not
		"agent:main:" + strings.Repeat("é", 122), // 255 bytes
		strings.Repeat("é", 128),                 // 256 bytes: the longest key
	} {
		v := watch(t, ctx, c, key, "write a note")
		if v.runErr != nil || len(v.result.Payloads) == 0 || v.result.Payloads[0].Text != "written" {
			t.Fatalf("key of %d bytes: %+v, %v", len(key), v.result, v.runErr)
		}
		name, err := events.KeyDirName(key)
		if err != nil {
			t.Fatal(err)
		}
		if tok, _ := events.KeyToken(key); len(tok) <= events.MaxDirName && name != tok {
			t.Errorf("key of %d bytes: directory %q, want its token %q (existing workspaces keep theirs)", len(key), name, tok)
		}
		if b, err := os.ReadFile(filepath.Join(root, name, "note.txt")); err != nil || string(b) != "hi" {
			t.Errorf("key of %d bytes: the note in its workspace: %q, %v", len(key), b, err)
		}
	}
}
