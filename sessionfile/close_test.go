package sessionfile

import (
	"strings"
	"testing"
	"time"
)

// TestCloseCalls: the calls of the branch's last assistant message left
// without a result get one "not run" error result each, in call order,
// chained after the leaf; nothing else is touched.
func TestCloseCalls(t *testing.T) {
	t.Parallel()
	const (
		header = `{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n"
		user   = `{"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}` + "\n"
	)
	assistant := func(id, parent string, calls ...string) string {
		var blocks []string
		for _, c := range calls {
			name, callID, _ := strings.Cut(c, ":")
			blocks = append(blocks, `{"type":"toolCall","id":"`+callID+`","name":"`+name+`","arguments":{"command":"rm -rf /"}}`)
		}
		return `{"type":"message","id":"` + id + `","parentId":"` + parent + `","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[` +
			strings.Join(blocks, ",") + `],"stopReason":"toolUse","timestamp":2}}` + "\n"
	}
	result := func(id, parent, call string) string {
		return `{"type":"message","id":"` + id + `","parentId":"` + parent + `","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"toolResult","toolCallId":"` +
			call + `","toolName":"exec","content":[{"type":"text","text":"ok"}],"isError":false,"timestamp":3}}` + "\n"
	}
	for _, tc := range []struct {
		name string
		file string
		want []string // "toolName:callId" of the results added
	}{
		{"a forged call at the end", header + user + assistant("a1", "u1", "exec:x1"), []string{"exec:x1"}},
		{"answered in part", header + user + assistant("a1", "u1", "exec:x1", "write:x2") + result("r1", "a1", "x1"), []string{"write:x2"}},
		{"all answered", header + user + assistant("a1", "u1", "exec:x1") + result("r1", "a1", "x1"), nil},
		{"an id called twice gets one result", header + user + assistant("a1", "u1", "exec:x1", "exec:x1"), []string{"exec:x1"}},
		{"a nameless call", header + user + assistant("a1", "u1", ":x1"), []string{"unknown:x1"}},
		// Only the last assistant's calls can be waiting for anyone.
		{"an earlier message's call", header + user + assistant("a1", "u1", "exec:x1") + assistant("a2", "a1"), nil},
		// Off the current branch (the leaf is u2, a sibling of a1).
		{"another branch", header + user + assistant("a1", "u1", "exec:x1") + `{"type":"message","id":"u2","parentId":"u1","timestamp":"2026-01-01T00:00:04.000Z","message":{"role":"user","content":"again","timestamp":4}}` + "\n", nil},
		{"no assistant", header + user, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := Read(strings.NewReader(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			now := time.UnixMilli(1750000000000)
			added := CloseCalls(f.Entries, "not run", now)
			var got []string
			parent := f.Entries[len(f.Entries)-1].ID
			for _, e := range added {
				m := e.Message
				if m == nil || !m.IsError || m.Content.Text() != "not run" || m.Timestamp != now.UnixMilli() || e.ID == "" || e.ParentID == nil || *e.ParentID != parent {
					t.Fatalf("added entry %+v (message %+v), want an error result chained after %q", e, m, parent)
				}
				parent = e.ID
				got = append(got, m.ToolName+":"+m.ToolCallID)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("closed %v, want %v", got, tc.want)
			}
			// Once closed, the branch has nothing left open.
			if again := CloseCalls(append(f.Entries, added...), "not run", now); again != nil {
				t.Fatalf("closing twice adds %d entries", len(again))
			}
		})
	}
}
