package transform_test

import (
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/transform"
)

func TestMessages(t *testing.T) {
	t.Parallel()
	target := provider.Model{ID: "claude-sonnet-4-6", Provider: "anthropic", API: "anthropic-messages"}
	same := func(m message.Message) message.Message {
		m.Role, m.Provider, m.API, m.Model = message.RoleAssistant, target.Provider, target.API, target.ID
		return m
	}
	other := func(m message.Message) message.Message {
		m.Role, m.Provider, m.API, m.Model = message.RoleAssistant, "openai", "openai-responses", "gpt-5"
		return m
	}
	redacted := message.Block{Type: message.BlockThinking, Thinking: "[Reasoning redacted]", ThinkingSignature: "enc", Redacted: true}
	msgs := []message.Message{
		message.User("hi", 1),
		same(message.Message{StopReason: message.StopToolUse, Content: message.BlocksOf(
			message.Thinking("", "sig"), redacted, message.Thinking("  ", ""), message.Thinking("mine", ""),
			message.ToolCall("toolu_1", "read", map[string]any{"p": "a"}))}),
		{Role: message.RoleToolResult, ToolCallID: "toolu_1", Content: message.BlocksOf(message.Text("ok"))},
		other(message.Message{StopReason: message.StopToolUse, Content: message.BlocksOf(
			message.Thinking("theirs", "x"), redacted,
			message.Block{Type: message.BlockText, Text: "t", TextSignature: "ts"},
			message.Block{Type: message.BlockToolCall, ID: "call_1|fc_1", Name: "read", ThoughtSignature: "sig"},
			message.ToolCall("call_2|fc_2", "read", nil))}),
		{Role: message.RoleToolResult, ToolCallID: "call_1|fc_1", Content: message.BlocksOf(message.Text("ok"))},
		other(message.Message{StopReason: message.StopError, ErrorMessage: "boom"}),
		message.User("next", 9),
	}
	orig := msgs[3].Content.Blocks[3].ID
	got := transform.Messages(msgs, target, func(id string) string { return transform.SanitizeID(id, 64) })
	if msgs[3].Content.Blocks[3].ID != orig {
		t.Fatal("input modified")
	}
	// user, same assistant, result, other assistant, result, synthetic result, user
	if len(got) != 7 {
		t.Fatalf("got %d messages: %+v", len(got), got)
	}
	sb := got[1].Content.Blocks
	if len(sb) != 4 || sb[0].ThinkingSignature != "sig" || !sb[1].Redacted || sb[2].Thinking != "mine" {
		t.Errorf("same-model blocks: %+v", sb)
	}
	ob := got[3].Content.Blocks
	if len(ob) != 4 || ob[0].Type != message.BlockText || ob[0].Text != "theirs" || ob[1].TextSignature != "" ||
		ob[2].ID != "call_1_fc_1" || ob[2].ThoughtSignature != "" || ob[3].ID != "call_2_fc_2" {
		t.Errorf("other-model blocks: %+v", ob)
	}
	if got[4].ToolCallID != "call_1_fc_1" {
		t.Errorf("result id not remapped: %q", got[4].ToolCallID)
	}
	if got[5].ToolCallID != "call_2_fc_2" || !got[5].IsError || got[5].Content.Text() != transform.NoResultText {
		t.Errorf("synthetic result: %+v", got[5])
	}
}
