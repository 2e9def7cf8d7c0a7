package compaction

import (
	"math"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// RoleBashExecution is the pi role of a user's "!command" run, stored as a
// message entry; ConvertToLLM turns it into a user message.
const RoleBashExecution message.Role = "bashExecution"

// imageChars is what an image counts for in an estimate: 4800 characters,
// 1200 tokens.
const imageChars = 4800

// EstimateTokens estimates the tokens m takes in a model's context the way
// pi does: characters / 4, rounded up. Characters are counted as JavaScript
// does (UTF-16 code units). Counted are the text of user, toolResult and
// custom content (4800 characters an image), the text, thinking, tool name
// and JSON arguments of an assistant message, a bashExecution's command and
// output and a summary message's summary. Other roles count 0.
func EstimateTokens(m message.Message) int {
	var chars int
	switch m.Role {
	case message.RoleUser, message.RoleToolResult:
		chars = contentChars(m.Content)
	case message.RoleAssistant:
		for i := range m.Content.Blocks {
			b := &m.Content.Blocks[i]
			switch b.Type {
			case message.BlockText:
				chars += jsLen(b.Text)
			case message.BlockThinking:
				chars += jsLen(b.Thinking)
			case message.BlockToolCall:
				chars += jsLen(b.Name) + jsLen(argsJSON(b.Arguments))
			}
		}
	case sessionfile.RoleCustom:
		chars = genericContentChars(m.Extra["content"])
	case RoleBashExecution:
		chars = jsLen(extraString(m, "command")) + jsLen(extraString(m, "output"))
	case sessionfile.RoleBranchSummary, sessionfile.RoleCompactionSummary:
		chars = jsLen(extraString(m, "summary"))
	}
	return (chars + 3) / 4
}

func contentChars(c message.Content) int {
	var n int
	for i := range c.Blocks {
		switch c.Blocks[i].Type {
		case message.BlockText:
			n += jsLen(c.Blocks[i].Text)
		case message.BlockImage:
			n += imageChars
		}
	}
	return n
}

// genericContentChars counts content still in its decoded JSON form (a
// custom message's string or block list).
func genericContentChars(v any) int {
	switch c := v.(type) {
	case string:
		return jsLen(c)
	case []any:
		var n int
		for _, e := range c {
			b, _ := e.(map[string]any)
			switch b["type"] {
			case message.BlockText:
				s, _ := b["text"].(string)
				n += jsLen(s)
			case message.BlockImage:
				n += imageChars
			}
		}
		return n
	}
	return 0
}

func extraString(m message.Message, key string) string {
	s, _ := m.Extra[key].(string)
	return s
}

// ContextTokens estimates the tokens of a model context as pi's
// estimateContextTokens does: the total of the last valid usage plus the
// estimates of the messages after it, or the sum of all estimates when no
// usage is known. A valid usage is that of an assistant message that did
// not end in error or aborted, with a non-zero total, and that is not
// stale: a usage reported before the last compaction (an assistant
// message placed before the compactionSummary message or not newer than
// it, the test sanitize.ZeroStaleUsage applies) measured the context
// before that compaction.
func ContextTokens(msgs []message.Message) int {
	summary, summaryTS := -1, int64(0)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == sessionfile.RoleCompactionSummary {
			summary, summaryTS = i, msgs[i].Timestamp
			break
		}
	}
	total := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		stale := i < summary || summary >= 0 && summaryTS != 0 && m.Timestamp != 0 && m.Timestamp <= summaryTS
		if u := validUsage(m); u != nil && !stale {
			return clampInt(u.Total()) + total
		}
		total += EstimateTokens(*m)
	}
	return total
}

func validUsage(m *message.Message) *message.Usage {
	if m.Role != message.RoleAssistant || m.Usage == nil || m.Usage.Total() <= 0 ||
		m.StopReason == message.StopError || m.StopReason == message.StopAborted {
		return nil
	}
	return m.Usage
}

func clampInt(n int64) int {
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	if n < 0 {
		return 0
	}
	return int(n)
}

// jsLen is the length of s in UTF-16 code units, JavaScript's String.length.
func jsLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return jsLenSlow(s)
		}
	}
	return n
}

func jsLenSlow(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// jsPrefix returns the longest prefix of s that is at most max UTF-16 code
// units long and does not split a character.
func jsPrefix(s string, max int) string {
	n := 0
	for i, r := range s {
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if n+w > max {
			return s[:i]
		}
		n += w
	}
	return s
}

// argsJSON is JSON.stringify of tool-call arguments; nil arguments encode
// as {} as pi writes them.
func argsJSON(args map[string]any) string {
	if args == nil {
		return "{}"
	}
	return string(ecmatext.AppendJSON(nil, args))
}
