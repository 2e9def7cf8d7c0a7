package wiretest

import (
	"fmt"

	"github.com/lanefleet/lanefleet/message"
)

// History is an n-message session as a model sees it, the shape the
// adapters' request-building benchmarks and wire-cache tests share: user,
// assistant with a tool call, tool result, assistant answer, repeated; the
// assistant messages are the given model's (provider, api, model), so an
// adapter sends them as its own.
func History(n int, prov, api, model string) []message.Message {
	var out []message.Message
	for i := 0; len(out) < n; i++ {
		out = append(out,
			message.User(fmt.Sprintf("question %d about the code in main.go", i), 1),
			message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: prov, Model: model, API: api,
				Content: message.BlocksOf(message.Text("Let me look."), message.ToolCall(fmt.Sprintf("call_%d", i), "read", map[string]any{"path": "main.go"}))},
			message.Message{Role: message.RoleToolResult, ToolCallID: fmt.Sprintf("call_%d", i), ToolName: "read",
				Content: message.BlocksOf(message.Text("package main\n\nfunc main() {}\n"))},
			message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Provider: prov, Model: model, API: api,
				Content: message.BlocksOf(message.Text("The file defines an empty main function."))})
	}
	return out[:n]
}
