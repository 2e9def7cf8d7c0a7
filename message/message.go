package message

import (
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Role is who wrote a message.
type Role string

// Roles of a pi transcript.
const (
	RoleUser       Role = "user"
	RoleAssistant  Role = "assistant"
	RoleToolResult Role = "toolResult"
)

// StopReason is why an assistant message ended.
type StopReason string

// Stop reasons. Error and Aborted messages always carry ErrorMessage.
const (
	StopStop    StopReason = "stop"
	StopLength  StopReason = "length"
	StopToolUse StopReason = "toolUse"
	StopError   StopReason = "error"
	StopAborted StopReason = "aborted"
)

// Content is a message body: a plain string (user messages may have one) or a
// list of blocks. The zero value is an empty block list.
type Content struct {
	// Blocks is the block list. When the content is a plain string, Blocks
	// holds one text block with that string.
	Blocks []Block
	plain  bool
}

// PlainText returns content that encodes as the JSON string s.
func PlainText(s string) Content { return Content{Blocks: []Block{Text(s)}, plain: true} }

// BlocksOf returns block-list content.
func BlocksOf(b ...Block) Content { return Content{Blocks: b} }

// IsPlain reports whether the content is a plain string.
func (c Content) IsPlain() bool { return c.plain }

// SetPlain marks content of exactly one text block as a plain string (true) or
// as a block list (false).
func (c *Content) SetPlain(plain bool) {
	c.plain = plain && len(c.Blocks) == 1 && c.Blocks[0].Type == BlockText
}

// Text returns the concatenated text of the text blocks.
func (c Content) Text() string {
	if len(c.Blocks) == 1 {
		return c.Blocks[0].Text
	}
	var n int
	for _, b := range c.Blocks {
		if b.Type == BlockText {
			n += len(b.Text)
		}
	}
	buf := make([]byte, 0, n)
	for _, b := range c.Blocks {
		if b.Type == BlockText {
			buf = append(buf, b.Text...)
		}
	}
	return string(buf)
}

// Clone returns a deep copy of c.
func (c Content) Clone() Content {
	out := Content{plain: c.plain}
	if c.Blocks != nil {
		out.Blocks = make([]Block, len(c.Blocks))
		for i, b := range c.Blocks {
			out.Blocks[i] = b.Clone()
		}
	}
	return out
}

func (c Content) toAny() any {
	if c.plain && len(c.Blocks) == 1 {
		return c.Blocks[0].Text
	}
	s := make([]any, len(c.Blocks))
	for i, b := range c.Blocks {
		s[i] = b.toObj()
	}
	return s
}

func contentFromAny(v any, path string) (Content, error) {
	switch x := v.(type) {
	case nil:
		return Content{}, nil
	case string:
		return PlainText(x), nil
	case []any:
		c := Content{Blocks: make([]Block, 0, len(x))}
		for i, e := range x {
			m, ok := e.(obj)
			if !ok {
				return Content{}, &FieldError{Field: fmt.Sprintf("%s[%d]", path, i), Want: "object", Got: kindOf(e)}
			}
			b, err := blockFromObj(m, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return Content{}, err
			}
			c.Blocks = append(c.Blocks, b)
		}
		return c, nil
	}
	return Content{}, &FieldError{Field: path, Want: "string or array", Got: kindOf(v)}
}

// Message is one message of a conversation. Which fields are meaningful
// depends on Role:
//
//   - user: Content (plain string or text/image blocks), Timestamp
//   - assistant: Content, API, Provider, Model, Usage, StopReason, ErrorMessage, Timestamp
//   - toolResult: ToolCallID, ToolName, Content, Details, IsError, Timestamp
//
// Timestamp is Unix milliseconds. Fields of other roles and unknown fields
// (including whole messages of custom roles such as bashExecution) are kept in
// Extra.
type Message struct {
	Role    Role
	Content Content

	API          string
	Provider     string
	Model        string
	Usage        *Usage
	StopReason   StopReason
	ErrorMessage string

	ToolCallID string
	ToolName   string
	Details    any
	IsError    bool

	Timestamp int64

	// Extra holds unknown fields, encoded back unchanged.
	Extra map[string]any
}

// User returns a user message with plain-string content.
func User(text string, ts int64) Message {
	return Message{Role: RoleUser, Content: PlainText(text), Timestamp: ts}
}

// ToolCalls returns the toolCall blocks of an assistant message.
func (m *Message) ToolCalls() []Block {
	var out []Block
	for _, b := range m.Content.Blocks {
		if b.Type == BlockToolCall {
			out = append(out, b)
		}
	}
	return out
}

// Clone returns a deep copy of m.
func (m Message) Clone() Message {
	c := m
	c.Content = m.Content.Clone()
	if m.Usage != nil {
		u := *m.Usage
		u.Extra = cloneMap(m.Usage.Extra)
		c.Usage = &u
	}
	c.Details = cloneAny(m.Details)
	c.Extra = cloneMap(m.Extra)
	return c
}

func (m Message) toObj() obj {
	o := obj{"role": string(m.Role)}
	switch m.Role {
	case RoleUser:
		o["content"] = m.Content.toAny()
	case RoleAssistant:
		o["content"] = m.Content.toAny()
		if m.API != "" {
			o["api"] = m.API
		}
		if m.Provider != "" {
			o["provider"] = m.Provider
		}
		if m.Model != "" {
			o["model"] = m.Model
		}
		if m.Usage != nil {
			o["usage"] = m.Usage.usageObj()
		}
		if m.StopReason != "" {
			o["stopReason"] = string(m.StopReason)
		}
		if m.ErrorMessage != "" {
			o["errorMessage"] = m.ErrorMessage
		}
	case RoleToolResult:
		o["toolCallId"] = m.ToolCallID
		if m.ToolName != "" {
			o["toolName"] = m.ToolName
		}
		o["content"] = m.Content.toAny()
		if m.Details != nil {
			o["details"] = m.Details
		}
		o["isError"] = m.IsError
	}
	if m.Timestamp != 0 {
		o["timestamp"] = m.Timestamp
	}
	putExtra(o, m.Extra)
	return o
}

func messageFromObj(o obj, path string) (Message, error) {
	r := &reader{m: o, path: path}
	m := Message{Role: Role(r.str("role"))}
	if r.err != nil {
		return Message{}, r.err
	}
	switch m.Role {
	case RoleUser, RoleAssistant, RoleToolResult:
		v, _ := r.take("content")
		c, err := contentFromAny(v, joinPath(path, "content"))
		if err != nil {
			return Message{}, err
		}
		m.Content = c
	}
	switch m.Role {
	case RoleAssistant:
		m.API = r.str("api")
		m.Provider = r.str("provider")
		m.Model = r.str("model")
		if u, ok := r.object("usage"); ok {
			uu, err := usageFromObj(u, joinPath(path, "usage"))
			if err != nil {
				return Message{}, err
			}
			m.Usage = &uu
		}
		m.StopReason = StopReason(r.str("stopReason"))
		m.ErrorMessage = r.str("errorMessage")
	case RoleToolResult:
		m.ToolCallID = r.str("toolCallId")
		m.ToolName = r.str("toolName")
		if d, ok := r.take("details"); ok {
			m.Details = d
		}
		m.IsError = r.boolean("isError")
	}
	if v, ok := r.m["timestamp"]; ok {
		if n, isInt := toInt(v); isInt {
			m.Timestamp = n
			delete(r.m, "timestamp")
		}
		// A non-numeric timestamp (some custom messages use ISO strings)
		// stays in Extra.
	}
	if r.err != nil {
		return Message{}, r.err
	}
	m.Extra = r.rest()
	return m, nil
}

func joinPath(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// MarshalJSON encodes the message with pi field names.
func (m Message) MarshalJSON() ([]byte, error) { return json.Marshal(m.toObj()) }

// UnmarshalJSON decodes a message, keeping unknown fields in Extra.
func (m *Message) UnmarshalJSON(data []byte) error {
	o, err := decodeJSONObject(data)
	if err != nil {
		return fmt.Errorf("message: %w", err)
	}
	v, err := messageFromObj(o, "")
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m Message) EncodeMsgpack(enc *msgpack.Encoder) error {
	if ok, err := writeBy(enc, func(b []byte) ([]byte, bool) { return appendMessage(b, &m) }); ok {
		return err
	}
	return encodeMsgpackObj(enc, m.toObj())
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Message) DecodeMsgpack(dec *msgpack.Decoder) error {
	o, err := decodeMsgpackObj(dec)
	if err != nil {
		return fmt.Errorf("message: %w", err)
	}
	v, err := messageFromObj(o, "")
	if err != nil {
		return err
	}
	*m = v
	return nil
}
