package message

import "unsafe"

// Sizes of the structs an entry's estimate counts.
const (
	entrySize   = int(unsafe.Sizeof(Entry{}))
	messageSize = int(unsafe.Sizeof(Message{}))
	blockSize   = int(unsafe.Sizeof(Block{}))
	usageSize   = int(unsafe.Sizeof(Usage{}))
	// mapSlot and valueSize are what a decoded map's key and value cost
	// besides their bytes (a map slot, an interface, a header).
	mapSlot   = 48
	valueSize = 16
	// maxDepth bounds the walk of nested values: deeper ones are charged
	// as leaves (a decoder bounds the depth anyway).
	maxDepth = 64
)

// Bytes estimates the heap memory e holds: its struct and strings, its
// message (struct, blocks, usage, texts, tool-call arguments and details)
// and the maps of unknown fields, and its raw line. A cache of decoded
// entries charges it, so its budget bounds what it keeps in memory
// rather than what the entries took encoded.
func (e *Entry) Bytes() int {
	n := entrySize + len(e.Type) + len(e.ID) + len(e.Timestamp) + len(e.CWD) + cap(e.Raw) + anyBytes(e.Fields, 0)
	if e.ParentID != nil {
		n += len(*e.ParentID) + valueSize
	}
	if m := e.Message; m != nil {
		n += messageSize + len(m.Role) + len(m.API) + len(m.Provider) + len(m.Model) + len(m.StopReason) + len(m.ErrorMessage) +
			len(m.ToolCallID) + len(m.ToolName) + anyBytes(m.Details, 0) + anyBytes(m.Extra, 0)
		if m.Usage != nil {
			n += usageSize + anyBytes(m.Usage.Extra, 0)
		}
		n += cap(m.Content.Blocks) * blockSize
		for i := range m.Content.Blocks {
			b := &m.Content.Blocks[i]
			n += len(b.Type) + len(b.Text) + len(b.TextSignature) + len(b.Thinking) + len(b.ThinkingSignature) + len(b.Data) +
				len(b.MimeType) + len(b.ID) + len(b.Name) + len(b.ThoughtSignature) + anyBytes(b.Arguments, 0) + anyBytes(b.Extra, 0)
		}
	}
	return n
}

// EntriesBytes is the sum of the entries' Bytes.
func EntriesBytes(es []Entry) int {
	n := 0
	for i := range es {
		n += es[i].Bytes()
	}
	return n
}

// anyBytes estimates what a decoded value holds besides the interface
// or field that refers to it.
func anyBytes(v any, depth int) int {
	if depth >= maxDepth {
		return valueSize
	}
	switch x := v.(type) {
	case nil:
		return 0
	case string:
		return len(x)
	case []byte:
		return cap(x)
	case map[string]any:
		n := 0
		for k, e := range x {
			n += mapSlot + len(k) + anyBytes(e, depth+1)
		}
		return n
	case []any:
		n := cap(x) * valueSize
		for _, e := range x {
			n += anyBytes(e, depth+1)
		}
		return n
	default:
		return valueSize
	}
}
