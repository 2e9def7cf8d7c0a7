package compaction

import (
	"slices"
	"strconv"
	"strings"

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
	first := true
	para := func(tag, text string) {
		if !first {
			b.WriteString("\n\n")
		}
		first = false
		b.WriteString(tag)
		b.WriteString(text)
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
				para("[Tool result]: ", truncateForSummary(s, toolResultMaxChars))
			}
		}
	}
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
		buf = appendJS(buf, bl.Arguments[k])
	}
	return string(append(buf, ')'))
}

// truncateForSummary keeps the first max characters (UTF-16 code units) of
// s and notes how many were cut.
func truncateForSummary(s string, max int) string {
	n := jsLen(s)
	if n <= max {
		return s
	}
	return jsPrefix(s, max) + "\n\n[... " + strconv.Itoa(n-max) + " more characters truncated]"
}
