package compaction

import (
	"slices"
	"strconv"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// toolResultMaxChars caps each tool result in a serialised transcript.
const toolResultMaxChars = 2000

// Serialize renders msgs as the plain-text transcript pi's summariser reads,
// so that the model summarises the conversation instead of continuing it.
// The messages are first converted with ConvertToLLM; then each becomes one
// or more paragraphs, separated by blank lines:
//
//	[User]: text
//	[Assistant thinking]: thinking
//	[Assistant]: text
//	[Assistant tool calls]: name(key="value", n=1); other()
//	[Tool result]: output (at most 2000 characters, then a truncation note)
//
// Messages without text are left out. The result is wrapped in
// <conversation> … </conversation> lines. Tool-call arguments are JSON
// values in key order (pi keeps insertion order, which a Go map has lost).
func Serialize(msgs []message.Message) string {
	var b strings.Builder
	b.WriteString("<conversation>\n")
	writeConversation(&b, ConvertToLLM(msgs))
	b.WriteString("\n</conversation>")
	return b.String()
}

func writeConversation(b *strings.Builder, msgs []message.Message) {
	b.Grow(serializedSize(msgs))
	first := true
	para := func(tag string, text ...string) {
		if !first {
			b.WriteString("\n\n")
		}
		first = false
		b.WriteString(tag)
		for _, s := range text {
			b.WriteString(s)
		}
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case message.RoleUser:
			if s := m.Content.Text(); s != "" {
				para("[User]: ", s)
			}
		case message.RoleAssistant:
			var text, thinking, calls []string
			for j := range m.Content.Blocks {
				bl := &m.Content.Blocks[j]
				switch bl.Type {
				case message.BlockText:
					text = append(text, bl.Text)
				case message.BlockThinking:
					thinking = append(thinking, bl.Thinking)
				case message.BlockToolCall:
					calls = append(calls, toolCallText(bl))
				}
			}
			if len(thinking) > 0 {
				para("[Assistant thinking]: ", strings.Join(thinking, "\n"))
			}
			if len(text) > 0 {
				para("[Assistant]: ", strings.Join(text, "\n"))
			}
			if len(calls) > 0 {
				para("[Assistant tool calls]: ", strings.Join(calls, "; "))
			}
		case message.RoleToolResult:
			if s := m.Content.Text(); s != "" {
				if n := jsLen(s); n > toolResultMaxChars {
					para("[Tool result]: ", jsPrefix(s, toolResultMaxChars), "\n\n[... ", strconv.Itoa(n-toolResultMaxChars), " more characters truncated]")
				} else {
					para("[Tool result]: ", s)
				}
			}
		}
	}
}

// serializedSize guesses the transcript's length, to allocate it once.
func serializedSize(msgs []message.Message) int {
	n := 0
	for i := range msgs {
		size := 32
		for j := range msgs[i].Content.Blocks {
			bl := &msgs[i].Content.Blocks[j]
			size += len(bl.Text) + len(bl.Thinking) + len(bl.Name) + 16*len(bl.Arguments)
		}
		if msgs[i].Role == message.RoleToolResult {
			size = min(size, 4*toolResultMaxChars+64)
		}
		n += size
	}
	return n
}

// toolCallText renders a call as name(k=v, …) with JSON values.
func toolCallText(bl *message.Block) string {
	keys := make([]string, 0, len(bl.Arguments))
	for k := range bl.Arguments {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	buf := make([]byte, 0, 64)
	buf = append(buf, bl.Name...)
	buf = append(buf, '(')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, k...)
		buf = append(buf, '=')
		buf = ecmatext.AppendJSON(buf, bl.Arguments[k])
	}
	return string(append(buf, ')'))
}
