package sessionfile

import (
	"slices"
	"time"

	"github.com/lanefleet/lanefleet/message"
)

// Roles of the messages Messages builds from non-message entries.
const (
	RoleCompactionSummary message.Role = "compactionSummary"
	RoleBranchSummary     message.Role = "branchSummary"
	RoleCustom            message.Role = "custom"
)

// Branch returns the current branch, root first: the entries on the parentId
// chain ending at the last entry of the file (pi's leaf). A chain that loops
// or names a missing parent ends there.
func Branch(entries []message.Entry) []message.Entry {
	if len(entries) == 0 {
		return nil
	}
	// Fast path: a file written by one writer is usually one chain, each
	// entry the child of the one before it. (A file that reuses an id
	// later on may resolve differently from the map walk below; ids are
	// unique in every file pi or Lanefleet writes.)
	for i := len(entries) - 1; i >= 0; i-- {
		p := entries[i].ParentID
		if p == nil {
			return slices.Clone(entries[i:])
		}
		if i == 0 || entries[i-1].ID != *p || entries[i-1].ID == "" {
			break
		}
	}
	byID := make(map[string]int, len(entries))
	for i := range entries {
		if entries[i].ID != "" {
			byID[entries[i].ID] = i
		}
	}
	seen := make(map[int]bool)
	var rev []int
	for i := len(entries) - 1; i >= 0 && !seen[i]; {
		seen[i] = true
		rev = append(rev, i)
		p := entries[i].ParentID
		if p == nil {
			break
		}
		j, ok := byID[*p]
		if !ok {
			break
		}
		i = j
	}
	out := make([]message.Entry, len(rev))
	for k, i := range rev {
		out[len(rev)-1-k] = entries[i]
	}
	return out
}

// Messages returns the conversation of the current branch as pi's
// buildSessionContext does: after the last compaction on the branch, a
// compactionSummary message, the entries from the compaction's
// firstKeptEntryId up to it, then everything after it; without a compaction,
// every entry. message entries give their message, custom_message entries a
// "custom" message and branch_summary entries with a summary a
// "branchSummary" message. The messages share no memory with entries.
func Messages(entries []message.Entry) []message.Message { return messages(entries, true) }

// MessagesShared is Messages without the copies: the messages of message
// entries share their content with entries, so neither may be modified
// while the other is in use. The run loop builds a request's context with
// it on every model call.
func MessagesShared(entries []message.Entry) []message.Message { return messages(entries, false) }

func messages(entries []message.Entry, clone bool) []message.Message {
	path := Branch(entries)
	comp := -1
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].Type == message.EntryCompaction {
			comp = i
			break
		}
	}
	out := make([]message.Message, 0, len(path)+1)
	add := func(e *message.Entry) {
		if !clone && e.Type == message.EntryMessage {
			if e.Message != nil {
				out = append(out, *e.Message)
			}
			return
		}
		if m, ok := entryMessage(e); ok {
			out = append(out, m)
		}
	}
	if comp < 0 {
		for i := range path {
			add(&path[i])
		}
		return out
	}
	c := &path[comp]
	summary := message.Message{Role: RoleCompactionSummary, Timestamp: isoMillis(c.Timestamp), Extra: map[string]any{"summary": c.Fields["summary"]}}
	if tb, ok := c.Fields["tokensBefore"]; ok {
		summary.Extra["tokensBefore"] = tb
	}
	out = append(out, summary)
	first, _ := c.Fields["firstKeptEntryId"].(string)
	keep := false
	for i := 0; i < comp; i++ {
		if path[i].ID == first {
			keep = true
		}
		if keep {
			add(&path[i])
		}
	}
	for i := comp + 1; i < len(path); i++ {
		add(&path[i])
	}
	return out
}

func entryMessage(e *message.Entry) (message.Message, bool) {
	switch e.Type {
	case message.EntryMessage:
		if e.Message == nil {
			return message.Message{}, false
		}
		return e.Message.Clone(), true
	case message.EntryCustomMessage:
		extra := map[string]any{}
		for _, k := range []string{"customType", "content", "display", "details"} {
			if v, ok := e.Fields[k]; ok {
				extra[k] = v
			}
		}
		m := message.Message{Role: RoleCustom, Timestamp: isoMillis(e.Timestamp), Extra: extra}
		return m.Clone(), true
	case message.EntryBranchSummary:
		s, _ := e.Fields["summary"].(string)
		if s == "" {
			return message.Message{}, false
		}
		m := message.Message{Role: RoleBranchSummary, Timestamp: isoMillis(e.Timestamp), Extra: map[string]any{"summary": s}}
		if from, ok := e.Fields["fromId"]; ok {
			m.Extra["fromId"] = from
		}
		return m, true
	}
	return message.Message{}, false
}

func isoMillis(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0
	}
	return t.UnixMilli()
}

// NewCustomEntry returns a "custom" entry (extension or runtime state such as
// sanitize's model-snapshot) with a fresh id, to be appended after parentID
// (nil for a root) at time ts.
func NewCustomEntry(customType string, data map[string]any, parentID *string, ts time.Time) message.Entry {
	fields := map[string]any{"customType": customType}
	if data != nil {
		fields["data"] = data
	}
	return message.Entry{
		Type:      message.EntryCustom,
		ID:        NewEntryID(),
		ParentID:  parentID,
		Timestamp: ts.UTC().Format("2006-01-02T15:04:05.000Z"),
		Fields:    fields,
	}
}
