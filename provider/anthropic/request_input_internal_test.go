package anthropic

import (
	"bytes"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// TestToolUseWithoutArgumentsSendsInput: Anthropic requires every tool_use
// block to carry input, so a call without arguments goes out with
// "input":{} (an empty map was dropped by omitempty), while blocks of other
// kinds carry none.
func TestToolUseWithoutArgumentsSendsInput(t *testing.T) {
	t.Parallel()
	model := provider.Model{ID: "claude-sonnet-4-5", Provider: "anthropic", API: "anthropic-messages", MaxTokens: 1000}
	for _, args := range []map[string]any{nil, {}} {
		msgs := []message.Message{
			message.User("what time is it?", 1),
			{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text("checking"), message.ToolCall("call_1", "clock", args)),
				API: "anthropic-messages", Provider: "anthropic", Model: model.ID, StopReason: message.StopToolUse, Timestamp: 2},
			{Role: message.RoleToolResult, ToolCallID: "call_1", ToolName: "clock", Content: message.PlainText("12:00"), Timestamp: 3},
		}
		for _, cache := range []*wireCache{nil, newWireCache(WireCacheBytesDefault)} {
			body, _, err := buildRequest(&provider.Request{Model: model, Messages: msgs, SessionID: "s"}, cache, "")
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(body, []byte(`"input":{}`)); n != 1 {
				t.Fatalf("args %v, cache %v: %d empty inputs in %s; want the tool_use's only", args, cache != nil, n, body)
			}
			if n := bytes.Count(body, []byte(`"input"`)); n != 1 {
				t.Fatalf("args %v: %d inputs in %s; want one", args, n, body)
			}
		}
	}
}
