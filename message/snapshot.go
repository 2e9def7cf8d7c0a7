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
// or a map is the same only in the very message the snapshot was taken of
// (the same memory).
type Snapshot struct {
	m      Message // as it was, its block list and usage shared
	blocks []Block // a copy of m's blocks
	usage  Usage   // a copy of m's usage
}

// Snap takes a snapshot of m.
func Snap(m *Message) Snapshot {
	s := Snapshot{m: *m}
	if m.Content.Blocks != nil {
		s.blocks = append(make([]Block, 0, len(m.Content.Blocks)), m.Content.Blocks...)
	}
	if m.Usage != nil {
		s.usage = *m.Usage
	}
	return s
}

// Bytes estimates what s keeps beyond its own struct: its block list.
func (s *Snapshot) Bytes() int {
	return cap(s.blocks) * int(unsafe.Sizeof(Block{}))
}

// Same reports whether m is the message s was taken of: equal in every
// field, its maps the very same (see Snapshot).
func (s *Snapshot) Same(m *Message) bool {
	// The usual case first: the very message, its memory as it was (the
	// same strings, block list and maps, the blocks and usage unchanged).
	if *raw(&s.m) == *raw(m) && len(s.blocks) == len(m.Content.Blocks) &&
		(len(s.blocks) == 0 || rawBlocks(s.blocks) == rawBlocks(m.Content.Blocks)) &&
		(m.Usage == nil || *(*[unsafe.Sizeof(Usage{})]byte)(unsafe.Pointer(&s.usage)) == *(*[unsafe.Sizeof(Usage{})]byte)(unsafe.Pointer(m.Usage))) {
		return true
	}
	a := &s.m
	if a.Role != m.Role || a.Content.plain != m.Content.plain || len(s.blocks) != len(m.Content.Blocks) ||
		(a.Content.Blocks == nil) != (m.Content.Blocks == nil) ||
		a.API != m.API || a.Provider != m.Provider || a.Model != m.Model ||
		a.StopReason != m.StopReason || a.ErrorMessage != m.ErrorMessage ||
		a.ToolCallID != m.ToolCallID || a.ToolName != m.ToolName || a.IsError != m.IsError ||
		a.Timestamp != m.Timestamp || !sameMap(a.Extra, m.Extra) || !sameAny(a.Details, m.Details) ||
		(a.Usage == nil) != (m.Usage == nil) || (a.Usage != nil && !sameUsage(&s.usage, m.Usage)) {
		return false
	}
	for i := range s.blocks {
		if !sameBlock(&s.blocks[i], &m.Content.Blocks[i]) {
			return false
		}
	}
	return true
}

// raw is the memory of a message: two messages of the same memory have
// the same strings, blocks list, maps and usage.
func raw(m *Message) *[unsafe.Sizeof(Message{})]byte {
	return (*[unsafe.Sizeof(Message{})]byte)(unsafe.Pointer(m))
}

// rawBlocks is the memory of a non-empty block list, as a string.
func rawBlocks(b []Block) string {
	return unsafe.String((*byte)(unsafe.Pointer(&b[0])), len(b)*int(unsafe.Sizeof(Block{})))
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

// Match lines msgs up with snaps, the snapshots of an earlier list of
// messages that msgs may repeat: it returns where in snaps msgs[0] is
// (0 when it is the first, or nowhere) and how many messages of msgs from
// there on are the same as the snapshots. A list that only grew matches at
// 0; one whose front was dropped (a history limit) at the first message
// kept. It costs one comparison per matched message, one per snapshot
// when msgs[0] is not snaps[0].
func Match(snaps []Snapshot, msgs []Message) (off, same int) {
	if len(msgs) == 0 || len(snaps) == 0 {
		return 0, 0
	}
	if !snaps[0].Same(&msgs[0]) {
		off = -1
		for j := 1; j < len(snaps); j++ {
			if snaps[j].Same(&msgs[0]) {
				off = j
				break
			}
		}
		if off < 0 {
			return 0, 0
		}
	}
	for same < len(msgs) && off+same < len(snaps) && snaps[off+same].Same(&msgs[same]) {
		same++
	}
	return off, same
}

// Snapshots are the snapshots of a list of messages, kept to line the next
// list up with it (see Match). The zero value is empty.
type Snapshots struct {
	s     []Snapshot
	bytes int // what the snapshots' block lists take
}

// Update makes ss the snapshots of msgs and returns how msgs lined up with
// the list before (Match): msgs[:same] are the old list's
// [off:off+same]. A caller keeping data per message moves it the same
// way: keep [off:off+same], at the front, and add the rest.
func (ss *Snapshots) Update(msgs []Message) (off, same int) {
	off, same = Match(ss.s, msgs)
	ss.keep(msgs, off, same)
	return off, same
}

// UpdateKnown is Update for msgs whose first known messages the caller
// knows to be the very ones, unchanged, that ss was last updated with
// (the same memory, never written since): they are not compared again,
// and the messages after them are lined up as Update does from there. A
// known beyond either list is taken as 0.
func (ss *Snapshots) UpdateKnown(msgs []Message, known int) (off, same int) {
	if known <= 0 || known > len(ss.s) || known > len(msgs) {
		return ss.Update(msgs)
	}
	same = known
	for same < len(msgs) && same < len(ss.s) && ss.s[same].Same(&msgs[same]) {
		same++
	}
	ss.keep(msgs, 0, same)
	return 0, same
}

// keep makes ss the snapshots of msgs, whose first same are ss's
// [off:off+same].
func (ss *Snapshots) keep(msgs []Message, off, same int) {
	for j := range off {
		ss.bytes -= ss.s[j].Bytes()
	}
	for j := off + same; j < len(ss.s); j++ {
		ss.bytes -= ss.s[j].Bytes()
	}
	if off > 0 {
		copy(ss.s, ss.s[off:off+same])
	}
	clear(ss.s[same:])
	ss.s = ss.s[:same]
	for i := same; i < len(msgs); i++ {
		sn := Snap(&msgs[i])
		ss.bytes += sn.Bytes()
		ss.s = append(ss.s, sn)
	}
}

// Len is the number of snapshots.
func (ss *Snapshots) Len() int { return len(ss.s) }

// Reset empties ss, keeping its array.
func (ss *Snapshots) Reset() {
	clear(ss.s)
	ss.s, ss.bytes = ss.s[:0], 0
}

// Bytes estimates the memory ss holds.
func (ss *Snapshots) Bytes() int {
	return ss.bytes + cap(ss.s)*int(unsafe.Sizeof(Snapshot{}))
}
