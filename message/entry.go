package message

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Entry types of a pi session file (version 3).
const (
	EntrySession             = "session"
	EntryMessage             = "message"
	EntryThinkingLevelChange = "thinking_level_change"
	EntryModelChange         = "model_change"
	EntryCompaction          = "compaction"
	EntryBranchSummary       = "branch_summary"
	EntryCustom              = "custom"
	EntryCustomMessage       = "custom_message"
	EntryLabel               = "label"
	EntrySessionInfo         = "session_info"
)

// SessionVersion is the pi session file version this package writes.
const SessionVersion = 3

// Entry is one line of a pi session file. For the header (Type "session"),
// Version, ID, Timestamp and CWD are set and ParentID is unused. For a
// "message" entry, Message is set. Every other payload field (a compaction's
// summary, a model_change's provider, …) lives in Fields, encoded at the top
// level of the line exactly as pi writes it.
type Entry struct {
	Type      string
	ID        string
	ParentID  *string // nil encodes as null (a root); header lines have no parentId
	Timestamp string  // ISO-8601 with milliseconds and Z

	Version int64  // header only; 0 = absent (v1)
	CWD     string // header only

	Message *Message // "message" entries

	// Fields holds every other top-level field, encoded back unchanged.
	Fields map[string]any

	// Raw is the line the entry was read from, verbatim (without its
	// newline), when it came from an imported session file; nil
	// otherwise. sessionfile.Write writes it back instead of re-encoding
	// the entry while it still decodes to the same entry, so an imported
	// file exports byte for byte. It travels in msgpack (storage, the lane
	// service's history when asked for) and never in JSON.
	Raw []byte
}

// rawKey is the msgpack key of a stored Entry.Raw (see EncodeMsgpack): an
// entry's fields always include "type", so a map of this key alone is a
// stored line, whatever fields a hostile line has.
const rawKey = "\x00raw"

// IsHeader reports whether e is a session header line.
func (e *Entry) IsHeader() bool { return e.Type == EntrySession }

// Clone returns a deep copy of e.
func (e Entry) Clone() Entry {
	c := e
	if e.ParentID != nil {
		p := *e.ParentID
		c.ParentID = &p
	}
	if e.Message != nil {
		m := e.Message.Clone()
		c.Message = &m
	}
	c.Fields = cloneMap(e.Fields)
	c.Raw = bytes.Clone(e.Raw)
	return c
}

// String field accessor for Fields.
func (e *Entry) Field(name string) string {
	s, _ := e.Fields[name].(string)
	return s
}

func (e Entry) toObj() obj {
	o := obj{"type": e.Type}
	if e.ID != "" {
		o["id"] = e.ID
	}
	if e.Type == EntrySession {
		if e.Version != 0 {
			o["version"] = e.Version
		}
		if e.CWD != "" {
			o["cwd"] = e.CWD
		}
	} else if e.ID != "" {
		if e.ParentID != nil {
			o["parentId"] = *e.ParentID
		} else {
			o["parentId"] = nil
		}
	}
	if e.Timestamp != "" {
		o["timestamp"] = e.Timestamp
	}
	if e.Message != nil {
		o["message"] = e.Message.toObj()
	}
	putExtra(o, e.Fields)
	return o
}

func entryFromObj(o obj) (Entry, error) {
	r := &reader{m: o}
	e := Entry{Type: r.str("type")}
	if v, ok := o["id"].(string); ok {
		e.ID = v
		delete(o, "id")
	}
	if e.Type == EntrySession {
		e.Version = r.int("version")
		e.CWD = r.str("cwd")
	} else if v, ok := o["parentId"]; ok {
		switch p := v.(type) {
		case nil:
			delete(o, "parentId")
		case string:
			e.ParentID = &p
			delete(o, "parentId")
		}
	}
	if v, ok := o["timestamp"].(string); ok {
		e.Timestamp = v
		delete(o, "timestamp")
	}
	if e.Type == EntryMessage {
		if mo, ok := r.object("message"); ok {
			m, err := messageFromObj(mo, "message")
			if err != nil {
				return Entry{}, err
			}
			e.Message = &m
		}
	}
	if r.err != nil {
		return Entry{}, r.err
	}
	e.Fields = r.rest()
	return e, nil
}

// MarshalJSON encodes the entry as one pi session line (without newline),
// in pi's key order (AppendJSON).
func (e Entry) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil), nil }

// UnmarshalJSON decodes one session line, keeping unknown fields.
func (e *Entry) UnmarshalJSON(data []byte) error {
	o, err := decodeJSONObject(data)
	if err != nil {
		return fmt.Errorf("message: entry: %w", err)
	}
	v, err := entryFromObj(o)
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// EncodeMsgpack implements msgpack.CustomEncoder. An entry whose Raw line
// still decodes to it is encoded as that line alone (a map of one binary
// value under rawKey), so storing an imported file costs what the file
// does; any other entry as its fields, without a stale Raw.
func (e Entry) EncodeMsgpack(enc *msgpack.Encoder) error {
	if e.RawFaithful() {
		if err := enc.EncodeMapLen(1); err != nil {
			return err
		}
		if err := enc.EncodeString(rawKey); err != nil {
			return err
		}
		return enc.EncodeBytes(e.Raw)
	}
	if ok, err := writeBy(enc, func(b []byte) ([]byte, bool) { return appendEntry(b, &e) }); ok {
		return err
	}
	return encodeMsgpackObj(enc, e.toObj())
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (e *Entry) DecodeMsgpack(dec *msgpack.Decoder) error {
	o, err := decodeMsgpackObj(dec)
	if err != nil {
		return fmt.Errorf("message: entry: %w", err)
	}
	if raw, ok := o[rawKey].([]byte); ok && len(o) == 1 {
		v, err := decodeRawLine(raw)
		if err != nil {
			return fmt.Errorf("message: entry: stored line: %w", err)
		}
		*e = v
		return nil
	}
	v, err := entryFromObj(o)
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// decodeRawLine decodes a session line into an entry that keeps it as Raw.
func decodeRawLine(raw []byte) (Entry, error) {
	o, err := decodeJSONObject(bytes.TrimSpace(raw))
	if err != nil {
		return Entry{}, err
	}
	v, err := entryFromObj(o)
	if err != nil {
		return Entry{}, err
	}
	v.Raw = raw
	return v, nil
}

// RawFaithful reports whether e.Raw is one line that decodes to e itself,
// so writing it gives back what was read: false without Raw, or when e was
// changed after it was read (a copy with a new id, a cut result).
func (e *Entry) RawFaithful() bool {
	if len(e.Raw) == 0 || bytes.IndexByte(e.Raw, '\n') >= 0 {
		return false
	}
	d, err := decodeRawLine(e.Raw)
	if err != nil {
		return false
	}
	return bytes.Equal(d.AppendJSON(nil), e.AppendJSON(nil))
}

// EntryFromMap builds an entry from one decoded JSON line whose values are
// nil, bool, string, int64 (integral numbers), float64, []any or
// map[string]any, as a streaming JSON decoder produces them; it lets such a
// decoder skip the generic decode of UnmarshalJSON. The entry takes ownership
// of m and of everything in it. Errors are those of UnmarshalJSON.
func EntryFromMap(m map[string]any) (Entry, error) { return entryFromObj(m) }
