package sanitize

import (
	"strings"

	"github.com/lanefleet/lanefleet/message"
)

// Anthropic's refusal test string, and what the reference sends in its
// place (runtime spec §3.1 step 6).
const (
	RefusalTrigger         = "ANTHROPIC_MAGIC_STRING_TRIGGER_REFUSAL"
	RefusalTriggerScrubbed = "ANTHROPIC MAGIC STRING TRIGGER REFUSAL (redacted)"
)

// ScrubRefusalTrigger replaces Anthropic's refusal test string in the text
// of the user messages of a request to provider, when provider is exactly
// "anthropic" (as the reference compares it), so a message cannot make the
// model refuse on purpose. The reference scrubs the prompt it sends; the
// fleet scrubs every user message of each request instead, because the
// transcript keeps what the sender sent: a history holding the string
// would make every later turn refuse. msgs is not modified; when nothing
// changes msgs itself is returned.
func ScrubRefusalTrigger(provider string, msgs []message.Message) []message.Message {
	if provider != "anthropic" {
		return msgs
	}
	var out []message.Message
	for i := range msgs {
		m := &msgs[i]
		if m.Role != message.RoleUser || !holdsTrigger(m) {
			continue
		}
		if out == nil {
			out = append([]message.Message(nil), msgs...)
		}
		nm := *m
		nm.Content.Blocks = append([]message.Block(nil), m.Content.Blocks...)
		for j := range nm.Content.Blocks {
			if b := &nm.Content.Blocks[j]; b.Type == message.BlockText {
				b.Text = strings.ReplaceAll(b.Text, RefusalTrigger, RefusalTriggerScrubbed)
			}
		}
		out[i] = nm
	}
	if out == nil {
		return msgs
	}
	return out
}

func holdsTrigger(m *message.Message) bool {
	for _, b := range m.Content.Blocks {
		if b.Type == message.BlockText && strings.Contains(b.Text, RefusalTrigger) {
			return true
		}
	}
	return false
}
