package openai

import (
	"fmt"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// benchHistory is an n-message session as a model sees it: user,
// assistant with a tool call, tool result, assistant answer, repeated.
func benchHistory(n int) []message.Message {
	var out []message.Message
	for i := 0; len(out) < n; i++ {
		out = append(out,
			message.User(fmt.Sprintf("question %d about the code in main.go", i), 1),
			message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "openai", Model: "gpt-4o-mini", API: "openai-completions",
				Content: message.BlocksOf(message.Text("Let me look."), message.ToolCall(fmt.Sprintf("call_%d", i), "read", map[string]any{"path": "main.go"}))},
			message.Message{Role: message.RoleToolResult, ToolCallID: fmt.Sprintf("call_%d", i), ToolName: "read",
				Content: message.BlocksOf(message.Text("package main\n\nfunc main() {}\n"))},
			message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Provider: "openai", Model: "gpt-4o-mini", API: "openai-completions",
				Content: message.BlocksOf(message.Text("The file defines an empty main function."))})
	}
	return out[:n]
}

// BenchmarkBuildChatRequest builds the Chat Completions body of one
// session's turn at 100, 1,000 and 2,000 history messages, as the turns of
// a long session do: the same history and a new prompt each time; without
// the wire cache (the baseline) and with it.
func BenchmarkBuildChatRequest(b *testing.B) {
	for _, n := range []int{100, 1000, 2000} {
		for _, cached := range []bool{false, true} {
			b.Run(fmt.Sprintf("messages=%d/wirecache=%v", n, cached), func(b *testing.B) {
				var cache *wireCache
				if cached {
					cache = newWireCache(WireCacheBytesDefault)
				}
				hist := benchHistory(n)
				msgs := append(hist[:n:n], message.User("", 2))
				m := provider.Model{ID: "gpt-4o-mini", Provider: "openai", API: "openai-completions", MaxTokens: 16384, Input: []string{"text"}}
				req := &provider.Request{Model: m, SystemPrompt: "You are a helpful assistant.", Messages: msgs, SessionID: "s1",
					Tools: []provider.Tool{{Name: "read", Description: "Read a file", Parameters: map[string]any{"type": "object"}}}}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					msgs[n] = message.User(fmt.Sprintf("and now %d?", i), 2)
					if _, err := buildChatRequest(req, cache); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
