package guard

import (
	"encoding/json"
	"maps"

	"github.com/lanefleet/lanefleet/message"
)

// RoleLegacyTool is the role of tool results in old transcripts; the guards
// treat such messages like toolResult ones.
const RoleLegacyTool message.Role = "tool"

// IsToolResult reports whether m is a tool result: role toolResult, the
// legacy role "tool", or a message whose "type" field is "toolResult".
func IsToolResult(m message.Message) bool {
	if m.Role == message.RoleToolResult || m.Role == RoleLegacyTool {
		return true
	}
	t, _ := m.Extra["type"].(string)
	return t == string(message.RoleToolResult)
}

// legacyContent reports whether m keeps its content in Extra (a message of a
// role the message package does not model, as decoded from a transcript).
func legacyContent(m message.Message) bool {
	if m.Role == message.RoleToolResult || m.Role == message.RoleUser || m.Role == message.RoleAssistant {
		return false
	}
	_, ok := m.Extra["content"]
	return ok && len(m.Content.Blocks) == 0
}

// toolContent returns the content of a tool result, including legacy
// messages whose content was kept in Extra.
func toolContent(m message.Message) message.Content {
	if !legacyContent(m) {
		return m.Content
	}
	switch v := m.Extra["content"].(type) {
	case string:
		return message.PlainText(v)
	case []any:
		data, err := json.Marshal(v)
		if err != nil {
			return message.Content{}
		}
		var blocks []message.Block
		if json.Unmarshal(data, &blocks) != nil {
			return message.Content{}
		}
		return message.BlocksOf(blocks...)
	}
	return message.Content{}
}

// withToolContent returns a copy of m with content c, written back where m
// keeps it.
func withToolContent(m message.Message, c message.Content) message.Message {
	if !legacyContent(m) {
		m.Content = c
		return m
	}
	m.Extra = maps.Clone(m.Extra)
	if c.IsPlain() {
		m.Extra["content"] = c.Blocks[0].Text
		return m
	}
	var blocks []any
	data, err := json.Marshal(c.Blocks)
	if err == nil && json.Unmarshal(data, &blocks) == nil {
		m.Extra["content"] = blocks
	}
	return m
}

// withoutDetails returns m without tool-result details (in either place a
// message may keep them).
func withoutDetails(m message.Message) message.Message {
	m.Details = nil
	if _, ok := m.Extra["details"]; ok {
		m.Extra = maps.Clone(m.Extra)
		delete(m.Extra, "details")
	}
	return m
}

func details(m message.Message) any {
	if m.Details != nil {
		return m.Details
	}
	return m.Extra["details"]
}
