package sanitize

import (
	"fmt"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// benchTranscript returns n messages of tool-using turns: a user question,
// an assistant message with thinking, text and a tool call, its result and
// a final answer with usage.
func benchTranscript(n int) []message.Message {
	msgs := make([]message.Message, 0, n)
	for i := 0; len(msgs) < n; i++ {
		id := fmt.Sprintf("toolu_01%08d|fc_%d", i, i)
		msgs = append(msgs,
			message.User(fmt.Sprintf("question %d: please read the file and summarise it", i), int64(i)),
			message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, API: "anthropic-messages", Provider: "anthropic", Model: "claude-opus-4-6",
				Content: message.BlocksOf(
					message.Thinking("I should read the file first.", "c2lnbmF0dXJl"),
					message.Text("Let me read it."),
					message.ToolCall(id, "read", map[string]any{"path": fmt.Sprintf("src/file%d.go", i)})),
				Usage: &message.Usage{Input: 100, Output: 20, TotalTokens: 120}},
			message.Message{Role: message.RoleToolResult, ToolCallID: id, ToolName: "read",
				Content: message.BlocksOf(message.Text("package main\n\nfunc main() {}\n")), Details: map[string]any{"lines": 3}},
			message.Message{Role: message.RoleAssistant, StopReason: message.StopStop,
				Content: message.BlocksOf(message.Text(fmt.Sprintf("File %d is an empty main package.", i)))},
		)
	}
	return msgs[:n]
}

func benchmarkPrepare(b *testing.B, n int, provider, api, model string) {
	msgs := benchTranscript(n)
	req := Request{Provider: provider, API: api, ModelID: model, Messages: msgs, Now: testNow, AllowedToolNames: []string{"read", "write"}}
	b.ReportAllocs()
	for b.Loop() {
		Prepare(req)
	}
}

func BenchmarkPrepareFinal(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("anthropic/%d", n), func(b *testing.B) {
			benchmarkPrepare(b, n, "anthropic", "anthropic-messages", "claude-opus-4-6")
		})
		b.Run(fmt.Sprintf("mistral/%d", n), func(b *testing.B) {
			benchmarkPrepare(b, n, "mistral", "openai-completions", "mistral-large")
		})
		b.Run(fmt.Sprintf("openai/%d", n), func(b *testing.B) {
			benchmarkPrepare(b, n, "openai", "openai-responses", "gpt-5.2")
		})
	}
}
