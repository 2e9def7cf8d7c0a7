package guard

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// sizesHistory is n messages of a coding session: a question, a tool call,
// a tool result of size result (every third one large) and an answer.
func sizesHistory(n, result int) []message.Message {
	var out []message.Message
	for i := 0; len(out) < n; i++ {
		text := strings.Repeat("r", result)
		if i%3 == 0 {
			text = strings.Repeat("line\n", result)
		}
		out = append(out,
			message.User(fmt.Sprintf("question %d", i), 1),
			message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text("look"),
				message.ToolCall(fmt.Sprint("c", i), "read", map[string]any{"path": "main.go"}))},
			toolResult(fmt.Sprint("c", i), text, map[string]any{"lines": 3.0}),
			message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text("done"))})
	}
	return out[:n]
}

// TestSizesGuardMatchesGuardContext runs a session's requests through one
// Sizes and checks each result against GuardContext's on the same
// messages: the history appended to, a message changed in place (its
// block rewritten in the shared block list, its content replaced), the
// front dropped (a history limit), a smaller window, a rewritten history.
// A Sizes that reused a stale estimate would cut or compact differently.
func TestSizesGuardMatchesGuardContext(t *testing.T) {
	hist := sizesHistory(400, 300)
	// At 60,000 tokens nothing is cut until a result grows past 60,000
	// characters (a stale estimate would leave it whole), nor compacted.
	steps := []struct {
		name    string
		msgs    func() []message.Message
		tokens  int
		reuse   int  // at least this many estimates reused
		changes bool // the guard rewrites messages
	}{
		{"first", func() []message.Message { return hist[:100] }, 60000, 0, false},
		{"appended", func() []message.Message { return hist[:120] }, 60000, 100, false},
		{"same", func() []message.Message { return hist[:120] }, 60000, 120, false},
		{"block rewritten in place", func() []message.Message {
			hist[2].Content.Blocks[0].Text = strings.Repeat("x", 200000)
			return hist[:120]
		}, 60000, 2, true},
		{"content replaced", func() []message.Message {
			hist[6] = toolResult("c1", strings.Repeat("y", 100000), nil)
			return hist[:121]
		}, 60000, 6, true},
		{"details replaced", func() []message.Message {
			hist[10].Details = strings.Repeat("d", 50000)
			return hist[:121]
		}, 60000, 10, true},
		{"front dropped", func() []message.Message { return hist[8:140] }, 60000, 100, true},
		{"front dropped again", func() []message.Message { return hist[12:140] }, 60000, 120, false},
		{"smaller window: cut and compacted", func() []message.Message { return hist[12:140] }, 2000, 128, true},
		{"copied history", func() []message.Message { return append([]message.Message(nil), hist[12:141]...) }, 60000, 128, false},
		{"unrelated history", func() []message.Message { return sizesHistory(50, 10) }, 60000, 0, false},
		{"empty", func() []message.Message { return nil }, 60000, 0, false},
		{"after empty", func() []message.Message { return hist[:300] }, 60000, 0, true},
	}
	var s Sizes
	for _, st := range steps {
		msgs := st.msgs()
		reused := s.Reused
		got := s.Guard(msgs, st.tokens)
		want, res := GuardContext(msgs, st.tokens)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: Sizes.Guard differs from GuardContext", st.name)
		}
		if res.Changed != st.changes {
			t.Errorf("%s: the guard changed messages: %v, want %v", st.name, res.Changed, st.changes)
		}
		if n := s.Reused - reused; n < st.reuse {
			t.Errorf("%s: %d estimates reused, want at least %d", st.name, n, st.reuse)
		}
		if s.snaps.Len() != len(msgs) || len(s.est) != len(msgs) {
			t.Fatalf("%s: keeps %d snapshots, %d estimates for %d messages", st.name, s.snaps.Len(), len(s.est), len(msgs))
		}
	}
}

// BenchmarkGuard guards one session's request at 100, 1,000 and 2,000
// messages as a long session's turns do (the history and a new prompt
// each time): GuardContext measuring every message (the baseline) and
// Sizes.Guard reusing the estimates of the last request's. The window
// holds the session: the guard passes it through, the common case.
func BenchmarkGuard(b *testing.B) {
	for _, n := range []int{100, 1000, 2000} {
		for _, sized := range []bool{false, true} {
			b.Run(fmt.Sprintf("messages=%d/sizes=%v", n, sized), func(b *testing.B) {
				msgs := append(sizesHistory(n, 300), message.User("", 2))
				var s Sizes
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					msgs[n] = message.User(fmt.Sprintf("and now %d?", i), 2)
					if sized {
						s.Guard(msgs, 1_000_000)
					} else {
						GuardContext(msgs, 1_000_000)
					}
				}
			})
		}
	}
}
