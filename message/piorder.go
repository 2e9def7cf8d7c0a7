package message

import (
	"slices"

	"github.com/lanefleet/lanefleet/ecmatext"
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

// appendValue appends a generic value as JSON.stringify would (objects
// whose key order was not kept with sorted keys): ecmatext's emulation, the
// module's one.
func appendValue(b []byte, v any) []byte { return ecmatext.AppendJSON(b, v) }

// appendString quotes s as JSON.stringify does.
func appendString(b []byte, s string) []byte { return ecmatext.AppendJSON(b, s) }
