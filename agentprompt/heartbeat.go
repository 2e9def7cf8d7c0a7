package agentprompt

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Heartbeat turns, as OpenClaw has them: a scheduled check-in whose
// prompt asks the model to follow the workspace's HEARTBEAT.md (loaded
// with the other context files) and to answer HeartbeatToken when nothing
// needs attention. Such an answer is an acknowledgement, not a reply.
const (
	// HeartbeatToken is the agreed "nothing to report" answer.
	HeartbeatToken = "HEARTBEAT_OK"
	// HeartbeatAckMaxChars is the most text (in characters) that may be
	// left around the token for the answer to still count as an
	// acknowledgement (OpenClaw's ackMaxChars default).
	HeartbeatAckMaxChars = 300
	// HeartbeatPrompt is a heartbeat turn's prompt when its message
	// carries no text of its own.
	HeartbeatPrompt = "This is a scheduled heartbeat check-in. If the workspace has a HEARTBEAT.md (it is in your context files), read it and do what it asks, strictly; do not pick up or repeat old tasks from earlier in the conversation. If nothing needs attention, reply with exactly " + HeartbeatToken + "."
)

// HeartbeatAck reports whether reply, a heartbeat turn's answer, is only
// an acknowledgement: HeartbeatToken at its start or end (surrounding
// whitespace and markup such as ** or backticks ignored) with at most
// HeartbeatAckMaxChars characters of other text. Such a reply is not
// delivered.
func HeartbeatAck(reply string) bool {
	s := trimMarkup(reply)
	switch {
	case strings.HasPrefix(s, HeartbeatToken):
		s = s[len(HeartbeatToken):]
	case strings.HasSuffix(s, HeartbeatToken):
		s = s[:len(s)-len(HeartbeatToken)]
	default:
		return false
	}
	return utf8.RuneCountInString(trimMarkup(s)) <= HeartbeatAckMaxChars
}

// trimMarkup trims whitespace and the markup models put around a bare
// token (emphasis, code ticks, a final full stop).
func trimMarkup(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || r == '*' || r == '`' || r == '.' || r == '"'
	})
}
