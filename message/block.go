package message

import (
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Block types.
const (
	BlockText     = "text"
	BlockThinking = "thinking"
	BlockImage    = "image"
	BlockToolCall = "toolCall"
)

// Block is one content block. Which fields are meaningful depends on Type:
//
//   - text: Text, TextSignature
//   - thinking: Thinking, ThinkingSignature, Redacted
//   - image: Data (base64, no data: prefix), MimeType
//   - toolCall: ID, Name, Arguments, ThoughtSignature
//
// Fields of other types, and fields this package does not know, are kept in
// Extra. A block of an unknown type keeps all its fields in Extra.
type Block struct {
	Type string

	Text          string
	TextSignature string

	Thinking          string
	ThinkingSignature string
	Redacted          bool

	Data     string
	MimeType string

	ID               string
	Name             string
	Arguments        map[string]any
	ThoughtSignature string

	// Extra holds unknown fields, encoded back unchanged.
	Extra map[string]any
}

// Text returns a text block.
func Text(s string) Block { return Block{Type: BlockText, Text: s} }

// Thinking returns a thinking block with an optional signature.
func Thinking(text, signature string) Block {
	return Block{Type: BlockThinking, Thinking: text, ThinkingSignature: signature}
}

// Image returns an image block from base64 data.
func Image(mimeType, base64Data string) Block {
	return Block{Type: BlockImage, MimeType: mimeType, Data: base64Data}
}

// ToolCall returns a toolCall block.
func ToolCall(id, name string, args map[string]any) Block {
	return Block{Type: BlockToolCall, ID: id, Name: name, Arguments: args}
}

// Clone returns a deep copy of b.
func (b Block) Clone() Block {
	c := b
	if b.Arguments != nil {
		c.Arguments = cloneMap(b.Arguments)
	}
	c.Extra = cloneMap(b.Extra)
	return c
}

func (b Block) toObj() obj {
	m := obj{"type": b.Type}
	switch b.Type {
	case BlockText:
		m["text"] = b.Text
		if b.TextSignature != "" {
			m["textSignature"] = b.TextSignature
		}
	case BlockThinking:
		m["thinking"] = b.Thinking
		if b.ThinkingSignature != "" {
			m["thinkingSignature"] = b.ThinkingSignature
		}
		if b.Redacted {
			m["redacted"] = true
		}
	case BlockImage:
		m["data"] = b.Data
		m["mimeType"] = b.MimeType
	case BlockToolCall:
		m["id"] = b.ID
		m["name"] = b.Name
		if b.Arguments != nil {
			m["arguments"] = b.Arguments
		} else {
			m["arguments"] = obj{}
		}
		if b.ThoughtSignature != "" {
			m["thoughtSignature"] = b.ThoughtSignature
		}
	}
	if b.Type == "" {
		delete(m, "type")
	}
	putExtra(m, b.Extra)
	return m
}

func blockFromObj(m obj, path string) (Block, error) {
	r := &reader{m: m, path: path}
	b := Block{Type: r.str("type")}
	switch b.Type {
	case BlockText:
		b.Text = r.str("text")
		b.TextSignature = r.str("textSignature")
	case BlockThinking:
		b.Thinking = r.str("thinking")
		// A signature that is not a string (OpenAI reasoning items are
		// sometimes stored as objects) stays in Extra.
		b.ThinkingSignature = r.optStr("thinkingSignature")
		b.Redacted = r.boolean("redacted")
	case BlockImage:
		b.Data = r.str("data")
		b.MimeType = r.str("mimeType")
	case BlockToolCall:
		b.ID = r.str("id")
		b.Name = r.str("name")
		if v, ok := r.take("arguments"); ok {
			switch a := v.(type) {
			case obj:
				b.Arguments = a
			case nil:
			default:
				// Malformed arguments (a string, an array) are kept verbatim
				// for the sanitiser to repair or drop.
				r.m["arguments"] = v
			}
		}
		// A non-string thought signature stays in Extra for the sanitiser
		// to remove.
		b.ThoughtSignature = r.optStr("thoughtSignature")
	}
	if r.err != nil {
		return Block{}, r.err
	}
	b.Extra = r.rest()
	return b, nil
}

// MarshalJSON encodes the block with pi field names.
func (b Block) MarshalJSON() ([]byte, error) { return json.Marshal(b.toObj()) }

// UnmarshalJSON decodes a block, keeping unknown fields in Extra.
func (b *Block) UnmarshalJSON(data []byte) error {
	m, err := decodeJSONObject(data)
	if err != nil {
		return fmt.Errorf("message: block: %w", err)
	}
	v, err := blockFromObj(m, "")
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (b Block) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeMsgpackObj(enc, b.toObj()) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (b *Block) DecodeMsgpack(dec *msgpack.Decoder) error {
	m, err := decodeMsgpackObj(dec)
	if err != nil {
		return fmt.Errorf("message: block: %w", err)
	}
	v, err := blockFromObj(m, "")
	if err != nil {
		return err
	}
	*b = v
	return nil
}
