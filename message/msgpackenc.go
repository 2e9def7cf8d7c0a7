package message

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/internal/mpw"
)

// A turn stores its new entries in its record and each model reply in its
// step journal; through the generic form (toObj) every one cost a map per
// message, block and usage, and the library's reflection over them. The
// usual entry — a user, assistant or tool result message of text,
// thinking and image blocks — is written here by hand instead: the bytes
// the generic path writes with every map's keys sorted (the generic path
// sorts only the outer map's, so the others came in any order; decoders
// do not care). TestAppendEntryAsGeneric compares the two.

// appendEntry appends e (not a raw line) to b; ok is false, b unchanged,
// for an entry it leaves to the generic path: not a message, or with
// fields of its own.
func appendEntry(b []byte, e *Entry) (_ []byte, ok bool) {
	if e.Type != EntryMessage || e.Message == nil || len(e.Fields) > 0 {
		return b, false
	}
	start := len(b)
	m := mpw.Begin(b)
	b = m.OptStr(b, "id", e.ID)
	b = m.Key(b, "message")
	if b, ok = appendMessage(b, e.Message); !ok {
		return b[:start], false
	}
	if e.ID != "" {
		b = m.Key(b, "parentId")
		if e.ParentID != nil {
			b = mpw.Str(b, *e.ParentID)
		} else {
			b = mpw.Nil(b)
		}
	}
	b = m.OptStr(b, "timestamp", e.Timestamp)
	b = m.Key(b, "type")
	b = mpw.Str(b, e.Type)
	return m.End(b), true
}

// appendMessage appends msg as toObj has it, keys sorted; ok is false for
// a message with extra fields, details, tool call arguments, blocks of
// other types or a role of its own.
func appendMessage(b []byte, msg *Message) (_ []byte, ok bool) {
	if len(msg.Extra) > 0 || msg.Details != nil || (msg.Usage != nil && len(msg.Usage.Extra) > 0) {
		return b, false
	}
	switch msg.Role {
	case RoleUser, RoleAssistant, RoleToolResult:
	default:
		return b, false
	}
	for i := range msg.Content.Blocks {
		bl := &msg.Content.Blocks[i]
		if len(bl.Extra) > 0 || bl.Arguments != nil {
			return b, false
		}
		switch bl.Type {
		case BlockText, BlockThinking, BlockImage, BlockToolCall:
		default:
			return b, false
		}
	}
	m := mpw.Begin(b)
	switch msg.Role {
	case RoleUser:
		b = appendContent(m.Key(b, "content"), &msg.Content)
		b = mpw.Str(m.Key(b, "role"), string(msg.Role))
		b = m.OptInt64(b, "timestamp", msg.Timestamp)
	case RoleAssistant:
		b = m.OptStr(b, "api", msg.API)
		b = appendContent(m.Key(b, "content"), &msg.Content)
		b = m.OptStr(b, "errorMessage", msg.ErrorMessage)
		b = m.OptStr(b, "model", msg.Model)
		b = m.OptStr(b, "provider", msg.Provider)
		b = mpw.Str(m.Key(b, "role"), string(msg.Role))
		b = m.OptStr(b, "stopReason", string(msg.StopReason))
		b = m.OptInt64(b, "timestamp", msg.Timestamp)
		if u := msg.Usage; u != nil {
			b = appendUsage(m.Key(b, "usage"), u)
		}
	case RoleToolResult:
		b = appendContent(m.Key(b, "content"), &msg.Content)
		b = mpw.Bool(m.Key(b, "isError"), msg.IsError)
		b = mpw.Str(m.Key(b, "role"), string(msg.Role))
		b = m.OptInt64(b, "timestamp", msg.Timestamp)
		b = mpw.Str(m.Key(b, "toolCallId"), msg.ToolCallID)
		b = m.OptStr(b, "toolName", msg.ToolName)
	}
	return m.End(b), true
}

// appendContent is Content.toAny: a plain string, or the blocks (of the
// types appendMessage checked) as maps.
func appendContent(b []byte, c *Content) []byte {
	if c.plain && len(c.Blocks) == 1 {
		return mpw.Str(b, c.Blocks[0].Text)
	}
	b = mpw.ArrayLen(b, len(c.Blocks))
	for i := range c.Blocks {
		bl := &c.Blocks[i]
		m := mpw.Begin(b)
		switch bl.Type {
		case BlockText:
			b = mpw.Str(m.Key(b, "text"), bl.Text)
			b = m.OptStr(b, "textSignature", bl.TextSignature)
		case BlockThinking:
			b = m.OptBool(b, "redacted", bl.Redacted)
			b = mpw.Str(m.Key(b, "thinking"), bl.Thinking)
			b = m.OptStr(b, "thinkingSignature", bl.ThinkingSignature)
		case BlockImage:
			b = mpw.Str(m.Key(b, "data"), bl.Data)
			b = mpw.Str(m.Key(b, "mimeType"), bl.MimeType)
		case BlockToolCall: // without arguments: an empty object
			b = append(m.Key(b, "arguments"), 0x80)
			b = mpw.Str(m.Key(b, "id"), bl.ID)
			b = mpw.Str(m.Key(b, "name"), bl.Name)
			b = m.OptStr(b, "thoughtSignature", bl.ThoughtSignature)
		}
		b = mpw.Str(m.Key(b, "type"), bl.Type)
		b = m.End(b)
	}
	return b
}

// appendUsage is Usage.usageObj without extra fields, keys sorted.
func appendUsage(b []byte, u *Usage) []byte {
	m := mpw.Begin(b)
	b = mpw.Int64(m.Key(b, "cacheRead"), u.CacheRead)
	b = mpw.Int64(m.Key(b, "cacheWrite"), u.CacheWrite)
	b = m.Key(b, "cost")
	cm := mpw.Begin(b)
	b = mpw.Float64(cm.Key(b, "cacheRead"), u.Cost.CacheRead)
	b = mpw.Float64(cm.Key(b, "cacheWrite"), u.Cost.CacheWrite)
	b = mpw.Float64(cm.Key(b, "input"), u.Cost.Input)
	b = mpw.Float64(cm.Key(b, "output"), u.Cost.Output)
	b = mpw.Float64(cm.Key(b, "total"), u.Cost.Total)
	b = cm.End(b)
	b = mpw.Int64(m.Key(b, "input"), u.Input)
	b = mpw.Int64(m.Key(b, "output"), u.Output)
	b = m.OptInt64(b, "totalTokens", u.TotalTokens)
	return m.End(b)
}

// bufs are the buffers entries and messages are written into before the
// encoder copies them.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeBy has appendTo write into a pooled buffer and hands the bytes to
// enc; ok is false, and nothing is written, when appendTo leaves the value
// to the generic path.
func writeBy(enc *msgpack.Encoder, appendTo func([]byte) ([]byte, bool)) (ok bool, err error) {
	p := bufs.Get().(*[]byte)
	b, ok := appendTo((*p)[:0])
	if ok {
		_, err = enc.Writer().Write(b)
	}
	if cap(b) <= 64<<10 {
		*p = b[:0]
		bufs.Put(p)
	}
	return ok, err
}

// AppendEntry appends e's msgpack encoding to b: what EncodeMsgpack writes
// (a raw line, the hand-written form, or the generic one), for encoders of
// the structs that hold entries (kvstore's turn records).
func AppendEntry(b []byte, e *Entry) ([]byte, error) {
	if e.RawFaithful() {
		b = mpw.Str(append(b, 0x81), rawKey)
		return mpw.Bin(b, e.Raw), nil
	}
	if out, ok := appendEntry(b, e); ok {
		return out, nil
	}
	var buf bytes.Buffer
	if err := encodeMsgpackObj(msgpack.NewEncoder(&buf), e.toObj()); err != nil {
		return b, fmt.Errorf("message: entry: %w", err)
	}
	return append(b, buf.Bytes()...), nil
}
