package message

import "unsafe"

// Snapshot is a shallow copy of a message taken to tell, cheaply, whether a
// message met later is still the same: the caches that keep what a
// session's messages cost or encode to between two requests hold one per
// message and re-use their result only for a message the snapshot finds
// unchanged.
//
// Same compares every field of the message and of each of its blocks (the
// snapshot keeps its own copy of the block list, so a block rewritten in
// place is seen), strings and numbers by value (two strings sharing their
// bytes compare in constant time, the usual case: the messages come from
// one transcript) and the maps and values of type any (tool-call
// arguments, details, extra fields) by identity: a map is never changed
// in place once it is in a message (the transcript shares them; every
// rewrite of the history copies on write), so the same map is the same
// content. A Details of another kind than nil, a string, a number, a bool
// or a map is never found the same.
type Snapshot struct {
	m Message // m.Content.Blocks is the snapshot's own copy
}

// Snap takes a snapshot of m.
func Snap(m *Message) Snapshot {
	s := Snapshot{m: *m}
	if m.Content.Blocks != nil {
		s.m.Content.Blocks = append(make([]Block, 0, len(m.Content.Blocks)), m.Content.Blocks...)
	}
	if m.Usage != nil {
		u := *m.Usage
		s.m.Usage = &u
	}
	return s
}

// Bytes estimates what s keeps beyond its own struct: its block list.
func (s *Snapshot) Bytes() int {
	return cap(s.m.Content.Blocks) * int(unsafe.Sizeof(Block{}))
}

// Same reports whether m is the message s was taken of: equal in every
// field, its maps the very same (see Snapshot).
func (s *Snapshot) Same(m *Message) bool {
	a := &s.m
	if a.Role != m.Role || a.Content.plain != m.Content.plain || len(a.Content.Blocks) != len(m.Content.Blocks) ||
		(a.Content.Blocks == nil) != (m.Content.Blocks == nil) ||
		a.API != m.API || a.Provider != m.Provider || a.Model != m.Model ||
		a.StopReason != m.StopReason || a.ErrorMessage != m.ErrorMessage ||
		a.ToolCallID != m.ToolCallID || a.ToolName != m.ToolName || a.IsError != m.IsError ||
		a.Timestamp != m.Timestamp || !sameMap(a.Extra, m.Extra) || !sameAny(a.Details, m.Details) ||
		(a.Usage == nil) != (m.Usage == nil) || (a.Usage != nil && !sameUsage(a.Usage, m.Usage)) {
		return false
	}
	for i := range a.Content.Blocks {
		if !sameBlock(&a.Content.Blocks[i], &m.Content.Blocks[i]) {
			return false
		}
	}
	return true
}

func sameBlock(a, b *Block) bool {
	return a.Type == b.Type && a.Text == b.Text && a.TextSignature == b.TextSignature &&
		a.Thinking == b.Thinking && a.ThinkingSignature == b.ThinkingSignature && a.Redacted == b.Redacted &&
		a.Data == b.Data && a.MimeType == b.MimeType && a.ID == b.ID && a.Name == b.Name &&
		sameMap(a.Arguments, b.Arguments) && a.ThoughtSignature == b.ThoughtSignature && sameMap(a.Extra, b.Extra)
}

func sameUsage(a, b *Usage) bool {
	return a.Input == b.Input && a.Output == b.Output && a.CacheRead == b.CacheRead && a.CacheWrite == b.CacheWrite &&
		a.TotalTokens == b.TotalTokens && a.Cost == b.Cost && sameMap(a.Extra, b.Extra)
}

// sameMap reports whether a and b are the very same map (or both nil).
func sameMap(a, b map[string]any) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}

// sameAny compares two values of type any: scalars by value, maps by
// identity; anything else is never the same.
func sameAny(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case string:
		s, ok := b.(string)
		return ok && a == s
	case float64:
		f, ok := b.(float64)
		return ok && a == f
	case int64:
		n, ok := b.(int64)
		return ok && a == n
	case int:
		n, ok := b.(int)
		return ok && a == n
	case bool:
		v, ok := b.(bool)
		return ok && a == v
	case map[string]any:
		m, ok := b.(map[string]any)
		return ok && sameMap(a, m)
	}
	return false
}
