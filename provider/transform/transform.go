// Package transform prepares a conversation for one target model before any
// adapter maps it to the wire (pi-ai's transformMessages): it drops or
// converts provider-specific reasoning that only the model that produced it
// can read, rewrites tool call ids the target API would reject (consistently
// in calls and results), drops failed assistant turns and inserts synthetic
// results for tool calls that never got one.
package transform

import (
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// NoResultText is the text of a synthetic tool result.
const NoResultText = "No result provided"

// SameModel reports whether assistant message m was produced by target:
// provider, api and model id all equal.
func SameModel(m *message.Message, target provider.Model) bool {
	return m.Provider == target.Provider && m.API == target.API && m.Model == target.ID
}

// Messages returns msgs prepared for target; msgs is not modified, and
// the result, which may be msgs itself, must not be either.
// normalizeID rewrites tool call ids of other models' calls for the target
// API (nil keeps them). Per assistant block:
//
//   - redacted thinking is kept only for the same model;
//   - signed thinking of the same model is kept even when its text is empty;
//   - thinking with blank text is dropped;
//   - thinking of another model becomes a plain text block;
//   - text of another model loses its textSignature;
//   - tool calls of another model lose their thoughtSignature and get
//     normalizeID(id), and later tool results follow the new id.
//
// Then assistant messages that ended in error or aborted are dropped, and a
// tool call with no result before the next assistant or user message gets a
// synthetic error result ("No result provided"); calls at the very end of
// the list are left for the caller.
func Messages(msgs []message.Message, target provider.Model, normalizeID func(string) string) []message.Message {
	// One pass: a tool result always follows its call, so the id map is
	// complete for it. Nothing is copied while nothing changes: a long
	// session of one model is returned as it is, and a changed one shares
	// the blocks of every message that needs no change.
	var idMap map[string]string
	var out []message.Message // nil while the result is msgs[:i]
	i := 0
	own := func() {
		if out == nil {
			out = make([]message.Message, i, len(msgs)+1)
			copy(out, msgs[:i])
		}
	}
	type call struct{ id, name string }
	var pending []call // tool calls of the last assistant still waiting
	var answered map[string]bool
	flush := func() {
		for _, c := range pending {
			if !answered[c.id] {
				own()
				out = append(out, message.Message{
					Role: message.RoleToolResult, ToolCallID: c.id, ToolName: c.name,
					Content: message.BlocksOf(message.Text(NoResultText)), IsError: true,
					Timestamp: lastTimestamp(out),
				})
			}
		}
		pending = pending[:0]
		if len(answered) > 0 {
			clear(answered)
		}
	}
	for ; i < len(msgs); i++ {
		m := &msgs[i]
		changed := false
		var blocks []message.Block
		switch m.Role {
		case message.RoleAssistant:
			blocks = assistantBlocks(m, target, normalizeID, &idMap)
			// The result's content is a block list (never plain), with
			// m's own blocks when none changed.
			changed = m.Content.IsPlain() || len(blocks) != len(m.Content.Blocks) ||
				(len(blocks) > 0 && &blocks[0] != &m.Content.Blocks[0]) || (blocks != nil) != (m.Content.Blocks != nil)
			if m.StopReason == message.StopError || m.StopReason == message.StopAborted {
				own()
				continue
			}
			flush()
			for j := range blocks {
				if b := &blocks[j]; b.Type == message.BlockToolCall {
					pending = append(pending, call{b.ID, b.Name})
				}
			}
		case message.RoleToolResult:
			id := m.ToolCallID
			if n, ok := idMap[id]; ok {
				id, changed = n, true
			}
			if answered == nil {
				answered = map[string]bool{}
			}
			answered[id] = true
		case message.RoleUser:
			flush()
		}
		if !changed {
			if out != nil {
				out = append(out, *m)
			}
			continue
		}
		own()
		c := *m
		switch c.Role {
		case message.RoleAssistant:
			c.Content = message.BlocksOf(blocks...)
		case message.RoleToolResult:
			c.ToolCallID = idMap[c.ToolCallID]
		}
		out = append(out, c)
	}
	if out == nil {
		if msgs == nil {
			return []message.Message{}
		}
		return msgs
	}
	return out
}

// assistantBlocks returns the blocks of assistant message m prepared for
// target (see Messages): m's own slice when no block changes, else a new
// one. Tool call ids it rewrites are added to *idMap.
func assistantBlocks(m *message.Message, target provider.Model, normalizeID func(string) string, idMap *map[string]string) []message.Block {
	same := SameModel(m, target)
	src := m.Content.Blocks
	var blocks []message.Block // nil while every block is kept as it is
	for j := range src {
		b := &src[j] // copied before it is changed
		keep, changed := true, false
		switch b.Type {
		case message.BlockThinking:
			switch {
			case b.Redacted:
				keep = same
			case same && b.ThinkingSignature != "":
			case strings.TrimSpace(b.Thinking) == "":
				keep = false
			case same:
			default:
				t := message.Text(b.Thinking)
				b, changed = &t, true
			}
		case message.BlockText:
			if !same && b.TextSignature != "" {
				t := *b
				t.TextSignature = ""
				b, changed = &t, true
			}
		case message.BlockToolCall:
			if same {
				break
			}
			id := b.ID
			if normalizeID != nil {
				id = normalizeID(b.ID)
			}
			if id != b.ID || b.ThoughtSignature != "" {
				if id != b.ID {
					if *idMap == nil {
						*idMap = map[string]string{}
					}
					(*idMap)[b.ID] = id
				}
				t := b.Clone()
				t.ID, t.ThoughtSignature = id, ""
				b, changed = &t, true
			}
		}
		if blocks == nil && (changed || !keep) {
			blocks = make([]message.Block, j, len(src))
			copy(blocks, src[:j])
		}
		if blocks != nil && keep {
			blocks = append(blocks, *b)
		}
	}
	if blocks == nil {
		return src
	}
	return blocks
}

func lastTimestamp(ms []message.Message) int64 {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Timestamp
}

// SanitizeID replaces characters outside [A-Za-z0-9_-] with "_" and cuts the
// result at max bytes (0 = no limit).
func SanitizeID(id string, max int) string {
	b := []byte(id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if max > 0 && len(b) > max {
		b = b[:max]
	}
	return string(b)
}

// SanitizeSurrogates returns s with invalid UTF-8 (lone surrogates decoded
// from JSON, broken bytes) removed, as providers reject it.
func SanitizeSurrogates(s string) string {
	return strings.ToValidUTF8(s, "")
}
