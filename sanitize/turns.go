package sanitize

import "github.com/lanefleet/lanefleet/message"

// mergeRuns merges a message of role target into the previously kept
// message when the last message with a role was also of role target. As in
// the reference, messages without a role are kept and do not interrupt a run,
// so such a message right before the merged one is what it is merged into.
func mergeRuns(msgs []message.Message, target message.Role, merge func(prev, cur *message.Message) message.Message) []message.Message {
	var out []message.Message
	lastRole := message.Role("")
	kept := 0 // messages in the output so far
	for i := range msgs {
		m := &msgs[i]
		if m.Role != "" && m.Role == target && lastRole == target {
			if out == nil {
				out = make([]message.Message, i, len(msgs))
				copy(out, msgs[:i])
			}
			out[kept-1] = merge(&out[kept-1], m)
			continue
		}
		if m.Role != "" {
			lastRole = m.Role
		}
		if out != nil {
			out = append(out, *m)
		}
		kept++
	}
	if out == nil {
		return msgs
	}
	return out
}

// contentBlocks returns the blocks of content for a merge. A plain-string
// content becomes one text block (empty strings contribute nothing).
func contentBlocks(c *message.Content) []message.Block {
	if c.IsPlain() {
		if c.Text() == "" {
			return nil
		}
	}
	return c.Blocks
}

func concatBlocks(a, b []message.Block) []message.Block {
	out := make([]message.Block, 0, len(a)+len(b))
	out = append(out, a...)
	return append(out, b...)
}

// ValidateGeminiTurns merges consecutive assistant messages, as Gemini
// requires alternating turns: the content is concatenated, the other fields
// come from the first message except usage, stopReason and errorMessage,
// which the later message overrides when set. Unlike the reference, a plain
// string content is kept as a text block rather than lost. msgs is not
// modified; when nothing changes msgs itself is returned.
func ValidateGeminiTurns(msgs []message.Message) []message.Message {
	return mergeRuns(msgs, message.RoleAssistant, func(prev, cur *message.Message) message.Message {
		m := *prev
		m.Content = message.BlocksOf(concatBlocks(contentBlocks(&prev.Content), contentBlocks(&cur.Content))...)
		if cur.Usage != nil {
			m.Usage = cur.Usage
		}
		if cur.StopReason != "" {
			m.StopReason = cur.StopReason
		}
		if cur.ErrorMessage != "" {
			m.ErrorMessage = cur.ErrorMessage
		}
		return m
	})
}

// ValidateAnthropicTurns merges consecutive user messages, as Anthropic and
// strict OpenAI-compatible APIs require: the result has every field of the
// later message, the content of both, and the later timestamp (the earlier
// one when the later has none). Unlike the reference, plain-string contents
// are kept as text blocks instead of being lost. msgs is not modified; when
// nothing changes msgs itself is returned.
func ValidateAnthropicTurns(msgs []message.Message) []message.Message {
	return mergeRuns(msgs, message.RoleUser, func(prev, cur *message.Message) message.Message {
		m := *cur
		m.Content = message.BlocksOf(concatBlocks(contentBlocks(&prev.Content), contentBlocks(&cur.Content))...)
		if m.Timestamp == 0 {
			m.Timestamp = prev.Timestamp
		}
		return m
	})
}

// LimitHistoryTurns keeps the last limit user turns: when msgs holds more
// than limit user messages, the result starts at the limit-th user message
// from the end and holds everything after it. It returns the index of the
// first kept message. A limit ≤ 0 keeps everything, including a leading
// assistant message. The result shares msgs' backing array.
func LimitHistoryTurns(msgs []message.Message, limit int) ([]message.Message, int) {
	if limit <= 0 || len(msgs) == 0 {
		return msgs, 0
	}
	users := 0
	last := len(msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != message.RoleUser {
			continue
		}
		users++
		if users > limit {
			return msgs[last:], last
		}
		last = i
	}
	return msgs, 0
}
