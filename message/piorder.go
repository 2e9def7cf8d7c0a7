package message

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// pi writes a session line with JSON.stringify: keys in the order its code
// creates them, no escaping of '<', '>', '&' or U+2028/U+2029. The tables
// below are that order for the objects pi creates; keys they do not name
// (unknown fields, tool arguments, details) follow in sorted order.
var (
	// Entry keys by entry type, as pi's SessionManager builds each entry.
	entryKeys = map[string][]string{
		EntrySession:             {"type", "version", "id", "timestamp", "cwd", "branchedFrom"},
		EntryMessage:             {"type", "id", "parentId", "timestamp", "message"},
		EntryThinkingLevelChange: {"type", "id", "parentId", "timestamp", "thinkingLevel"},
		EntryModelChange:         {"type", "id", "parentId", "timestamp", "provider", "modelId"},
		EntryCompaction:          {"type", "id", "parentId", "timestamp", "summary", "firstKeptEntryId", "tokensBefore", "details", "fromHook"},
		EntryBranchSummary:       {"type", "id", "parentId", "timestamp", "fromId", "summary", "details", "fromHook"},
		EntryCustom:              {"type", "customType", "data", "id", "parentId", "timestamp"},
		EntryCustomMessage:       {"type", "customType", "content", "display", "details", "id", "parentId", "timestamp"},
		EntryLabel:               {"type", "id", "parentId", "timestamp", "targetId", "label"},
		EntrySessionInfo:         {"type", "id", "parentId", "timestamp", "name"},
	}
	// otherEntryKeys orders an entry of a type pi does not write.
	otherEntryKeys = []string{"type", "id", "parentId", "timestamp"}
	messageKeys    = map[Role][]string{
		RoleUser:       {"role", "content", "timestamp"},
		RoleAssistant:  {"role", "content", "api", "provider", "model", "usage", "stopReason", "errorMessage", "timestamp"},
		RoleToolResult: {"role", "toolCallId", "toolName", "content", "details", "isError", "timestamp"},
	}
	otherMessageKeys = []string{"role", "customType", "command", "output", "exitCode", "cancelled", "truncated", "fullOutputPath", "content", "display", "details", "timestamp"}
	blockKeys        = map[string][]string{
		BlockText:     {"type", "text", "textSignature"},
		BlockThinking: {"type", "thinking", "thinkingSignature", "redacted"},
		BlockImage:    {"type", "data", "mimeType"},
		BlockToolCall: {"type", "id", "name", "arguments", "thoughtSignature"},
	}
	usageKeys = []string{"input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"}
	costKeys  = []string{"input", "output", "cacheRead", "cacheWrite", "total"}
)

// AppendJSON appends e as one pi session line (without newline), encoded
// as pi encodes it: pi's key order, '<', '>' and '&' as themselves. Raw is
// not consulted (see sessionfile.Write).
func (e Entry) AppendJSON(dst []byte) []byte {
	o := e.toObj()
	keys, ok := entryKeys[e.Type]
	if !ok {
		keys = otherEntryKeys
	}
	return appendOrdered(dst, o, keys, func(b []byte, k string, v any) []byte {
		if m, ok := v.(obj); ok && k == "message" {
			return appendMessageObj(b, m)
		}
		return appendValue(b, v)
	})
}

func appendMessageObj(b []byte, m obj) []byte {
	role, _ := m["role"].(string)
	keys, ok := messageKeys[Role(role)]
	if !ok {
		keys = otherMessageKeys
	}
	return appendOrdered(b, m, keys, func(b []byte, k string, v any) []byte {
		switch x := v.(type) {
		case []any:
			if k == "content" {
				return appendBlocks(b, x)
			}
		case obj:
			if k == "usage" {
				return appendOrdered(b, x, usageKeys, func(b []byte, k string, v any) []byte {
					if c, ok := v.(obj); ok && k == "cost" {
						return appendOrdered(b, c, costKeys, nil)
					}
					return appendValue(b, v)
				})
			}
		}
		return appendValue(b, v)
	})
}

func appendBlocks(b []byte, blocks []any) []byte {
	b = append(b, '[')
	for i, v := range blocks {
		if i > 0 {
			b = append(b, ',')
		}
		m, ok := v.(obj)
		if !ok {
			b = appendValue(b, v)
			continue
		}
		t, _ := m["type"].(string)
		b = appendOrdered(b, m, blockKeys[t], nil)
	}
	return append(b, ']')
}

// appendOrdered appends o with keys first, in that order, then its other
// keys sorted; child encodes each value (appendValue when nil).
func appendOrdered(b []byte, o obj, keys []string, child func(b []byte, k string, v any) []byte) []byte {
	if child == nil {
		child = func(b []byte, _ string, v any) []byte { return appendValue(b, v) }
	}
	b = append(b, '{')
	n := 0
	put := func(k string, v any) {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendString(b, k)
		b = append(b, ':')
		b = child(b, k, v)
	}
	for _, k := range keys {
		if v, ok := o[k]; ok {
			put(k, v)
		}
	}
	rest := make([]string, 0, len(o))
	for k := range o {
		if !slices.Contains(keys, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		put(k, o[k])
	}
	return append(b, '}')
}

// appendValue appends a generic value as JSON.stringify would: objects
// with sorted keys (their order was not kept), no HTML escaping.
func appendValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case string:
		return appendString(b, x)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case float64:
		return appendFloat(b, x)
	case obj:
		return appendOrdered(b, x, nil, nil)
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, e)
		}
		return append(b, ']')
	}
	// Other types (typed maps and slices some callers put in details):
	// through encoding/json, without its HTML escaping.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return append(b, "null"...)
	}
	return append(b, bytes.TrimRight(buf.Bytes(), "\n")...)
}

// appendFloat formats f as JavaScript's Number.prototype.toString does
// for the values JSON can hold (as encoding/json does).
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...) // JSON.stringify's choice
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// 1e-07 → 1e-7
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendString quotes s as JSON.stringify does: only '"', '\\' and
// control characters are escaped; invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
