package sanitize_test

import (
	"encoding/json"
	"fmt"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sanitize"
)

func ExamplePrepare() {
	history := []message.Message{
		message.User("list the files", 1),
		{Role: message.RoleAssistant, StopReason: message.StopToolUse, Content: message.BlocksOf(
			message.ToolCall("call_1|fc_1", "exec", map[string]any{"command": "ls"}))},
		message.User("hello?", 3),
	}
	res := sanitize.Prepare(sanitize.Request{
		Provider: "anthropic", API: "anthropic-messages", ModelID: "claude-opus-4-6",
		Messages: history, Now: 1750000000000,
	})
	for _, m := range res.Final {
		line, _ := json.Marshal(m)
		fmt.Println(string(line))
	}
	// Output:
	// {"content":"list the files","role":"user","timestamp":1}
	// {"content":[{"arguments":{"command":"ls"},"id":"call1fc1","name":"exec","type":"toolCall"}],"role":"assistant","stopReason":"toolUse"}
	// {"content":[{"text":"[openclaw] missing tool result in session history; inserted synthetic error result for transcript repair.","type":"text"}],"isError":true,"role":"toolResult","timestamp":1750000000000,"toolCallId":"call1fc1","toolName":"exec"}
	// {"content":"hello?","role":"user","timestamp":3}
}
