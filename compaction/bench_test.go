package compaction

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// benchSession returns n message entries shaped like a coding session:
// prompts, assistant messages with thinking, text and a tool call, and tool
// results of a few kilobytes.
func benchSession(n int) []message.Entry {
	var h hist
	output := strings.Repeat("func handler(w http.ResponseWriter, r *http.Request) {\n\tfmt.Fprintf(w, \"hello %s\", r.URL.Path)\n}\n", 30)
	for i := range n {
		switch i % 4 {
		case 0:
			h.user(fmt.Sprintf("Please look at handler %d and fix the bug in the routing.", i))
		case 1:
			id := fmt.Sprintf("toolu_%d", i)
			h.msg(message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Timestamp: 1773570000000,
				Usage: &message.Usage{Input: 12, Output: 200, CacheRead: int64(3000 * i), TotalTokens: int64(3212 * i)},
				Content: message.BlocksOf(message.Thinking("The handler ignores the method; read it first.", "sig"),
					message.Text("Reading the handler."),
					message.ToolCall(id, []string{"read", "edit"}[i/4%2], map[string]any{"path": fmt.Sprintf("h%d.go", i%7), "limit": int64(200)}))})
		case 2:
			h.result(fmt.Sprintf("toolu_%d", i-1), "read", output)
		case 3:
			h.asst("Fixed: the route now matches on the method as well.")
		}
	}
	return h.entries
}

func BenchmarkPrepareSerialize(b *testing.B) {
	entries := benchSession(200)
	s := Settings{KeepRecentTokens: 20000}
	b.ReportAllocs()
	for b.Loop() {
		p, err := Prepare(entries, s)
		if err != nil {
			b.Fatal(err)
		}
		if len(Serialize(p.MessagesToSummarize)) == 0 {
			b.Fatal("empty transcript")
		}
	}
}
