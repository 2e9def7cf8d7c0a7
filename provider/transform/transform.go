// Package transform prepares a conversation for one target model before any
// adapter maps it to the wire (pi-ai's transformMessages): it drops or
// converts provider-specific reasoning that only the model that produced it
// can read, rewrites tool call ids the target API would reject (consistently
// in calls and results), drops failed assistant turns and inserts synthetic
// results for tool calls that never got one.
//
// transform.go holds Messages, one pass over the messages whose state
// between two messages is all the later ones depend on; append.go holds
// Appender, which keeps that pass's result and state for the messages a
// caller never writes again, so that a long session's request prepares
// only its new messages.
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
//
// Each message's result depends only on it and on the messages before it
// (one pass, see pass): the result for a list followed by more messages is
// the result for the list followed by theirs, which Appender builds on.
func Messages(msgs []message.Message, target provider.Model, normalizeID func(string) string) []message.Message {
	// Nothing is copied while nothing changes: a long session of one
	// model is returned as it is, and a changed one shares the blocks of
	// every message that needs no change.
	var p pass
	l := list{src: msgs}
	for i := range msgs {
		p.step(&l, i, target, normalizeID)
	}
	if !l.owned {
		if msgs == nil {
			return []message.Message{}
		}
		return msgs
	}
	return l.out
}

// call is a tool call waiting for its result.
type call struct{ id, name string }

// pass is Messages' state between two messages: what preparing the
// messages after them depends on besides themselves.
type pass struct {
	// idMap maps the tool call ids rewritten so far to their new ids;
	// base, when set, holds those rewritten before (it is read, never
	// written: an Appender's kept pass under the messages it does not
	// keep).
	idMap, base map[string]string
	// pending are the tool calls of the last assistant message kept, and
	// answered the ids of the results seen since.
	pending  []call
	answered map[string]bool
}

// newID returns the id a tool result of call id follows, ok when it was
// rewritten.
func (p *pass) newID(id string) (string, bool) {
	if n, ok := p.idMap[id]; ok {
		return n, true
	}
	n, ok := p.base[id]
	return n, ok
}

// list is the result of a pass in the making: while it is not owned, it
// is the source messages consumed so far, as they are (src[:n]).
type list struct {
	src   []message.Message
	n     int // source messages consumed while not owned
	out   []message.Message
	owned bool
}

// own makes l's result its own array: a copy of the source messages it
// had consumed.
func (l *list) own() {
	if !l.owned {
		l.out = append(make([]message.Message, 0, len(l.src)+1), l.src[:l.n]...)
		l.owned = true
	}
}

// keep adds src[i] as it is.
func (l *list) keep(i int) {
	if l.owned {
		l.out = append(l.out, l.src[i])
	} else {
		l.n = i + 1
	}
}

// add adds a message that is no source message as it is.
func (l *list) add(m message.Message) {
	l.own()
	l.out = append(l.out, m)
}

// last is the result's last message, nil if none.
func (l *list) last() *message.Message {
	switch {
	case l.owned && len(l.out) > 0:
		return &l.out[len(l.out)-1]
	case !l.owned && l.n > 0:
		return &l.src[l.n-1]
	}
	return nil
}

// step prepares src[i], the message after those p has seen, into l.
func (p *pass) step(l *list, i int, target provider.Model, normalizeID func(string) string) {
	m := &l.src[i]
	changed := false
	var blocks []message.Block
	switch m.Role {
	case message.RoleAssistant:
		blocks = assistantBlocks(m, target, normalizeID, &p.idMap)
		// The result's content is a block list (never plain), with
		// m's own blocks when none changed.
		changed = m.Content.IsPlain() || len(blocks) != len(m.Content.Blocks) ||
			(len(blocks) > 0 && &blocks[0] != &m.Content.Blocks[0]) || (blocks != nil) != (m.Content.Blocks != nil)
		if m.StopReason == message.StopError || m.StopReason == message.StopAborted {
			l.own()
			return
		}
		p.flush(l)
		for j := range blocks {
			if b := &blocks[j]; b.Type == message.BlockToolCall {
				p.pending = append(p.pending, call{b.ID, b.Name})
			}
		}
	case message.RoleToolResult:
		id := m.ToolCallID
		if n, ok := p.newID(id); ok {
			id, changed = n, true
		}
		if p.answered == nil {
			p.answered = map[string]bool{}
		}
		p.answered[id] = true
		if changed {
			c := *m
			c.ToolCallID = id
			l.add(c)
			return
		}
	case message.RoleUser:
		p.flush(l)
	}
	if !changed {
		l.keep(i)
		return
	}
	c := *m
	c.Content = message.BlocksOf(blocks...)
	l.add(c)
}

// flush adds a synthetic result for each pending call that got none.
func (p *pass) flush(l *list) {
	for _, c := range p.pending {
		if !p.answered[c.id] {
			var ts int64
			if last := l.last(); last != nil {
				ts = last.Timestamp
			}
			l.add(message.Message{
				Role: message.RoleToolResult, ToolCallID: c.id, ToolName: c.name,
				Content: message.BlocksOf(message.Text(NoResultText)), IsError: true,
				Timestamp: ts,
			})
		}
	}
	p.pending = p.pending[:0]
	if len(p.answered) > 0 {
		clear(p.answered)
	}
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
