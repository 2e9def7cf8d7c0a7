package sessionfile

import (
	"time"

	"github.com/lanefleet/lanefleet/message"
)

// CloseCalls returns the entries that answer the tool calls the current
// branch's last assistant message left without a result (as an imported
// session may end): one error tool result per call, with text, chained
// after the last entry (pi's leaf) at time now. It returns nil when no
// call is left open. Calls of earlier messages are not pending for
// anyone (the runtime's pairing repair answers them in requests), so
// they are left alone; entries is not modified.
func CloseCalls(entries []message.Entry, text string, now time.Time) []message.Entry {
	path := Branch(entries)
	var open []message.Block
	for i := len(path) - 1; i >= 0; i-- {
		m := path[i].Message
		if path[i].Type != message.EntryMessage || m == nil || m.Role != message.RoleAssistant {
			continue
		}
		answered := map[string]bool{}
		for _, e := range path[i+1:] {
			if r := e.Message; e.Type == message.EntryMessage && r != nil && r.Role == message.RoleToolResult {
				answered[r.ToolCallID] = true
			}
		}
		for _, c := range m.ToolCalls() {
			if !answered[c.ID] {
				answered[c.ID] = true // one result for an id called twice
				open = append(open, c)
			}
		}
		break
	}
	if len(open) == 0 {
		return nil
	}
	parent := ""
	for i := len(entries) - 1; i >= 0 && parent == ""; i-- {
		parent = entries[i].ID
	}
	ts := now.UTC().Format("2006-01-02T15:04:05.000Z")
	out := make([]message.Entry, 0, len(open))
	for _, c := range open {
		name := c.Name
		if name == "" {
			name = "unknown"
		}
		m := message.Message{Role: message.RoleToolResult, ToolCallID: c.ID, ToolName: name,
			Content: message.BlocksOf(message.Text(text)), IsError: true, Timestamp: now.UnixMilli()}
		e := message.Entry{Type: message.EntryMessage, ID: NewEntryID(), Timestamp: ts, Message: &m}
		if parent != "" {
			p := parent
			e.ParentID = &p
		}
		parent = e.ID
		out = append(out, e)
	}
	return out
}
