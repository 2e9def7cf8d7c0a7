package sanitize

import (
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// MaxToolNameLen is the longest tool name a call may have.
const MaxToolNameLen = 64

// ToolInputReport says what RepairToolCallInputs did.
type ToolInputReport struct {
	// Changed is true when a call was dropped or a name trimmed.
	Changed bool
	// DroppedToolCalls counts the removed tool-call blocks.
	DroppedToolCalls int
	// DroppedAssistantMessages counts assistant messages removed because
	// they lost every block.
	DroppedAssistantMessages int
}

func validToolName(name string) bool {
	if name == "" || len(name) > MaxToolNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// allowSet is a lower-cased tool allowlist; nil allows every name.
type allowSet map[string]struct{}

func newAllowSet(names []string) allowSet {
	s := make(allowSet, len(names))
	for _, n := range names {
		if t := strings.ToLower(ecmatext.Trim(n)); t != "" {
			s[t] = struct{}{}
		}
	}
	if len(s) == 0 {
		// An empty allowlist means no allowlist, as in the reference.
		return nil
	}
	return s
}

// RepairToolCallInputs drops malformed tool calls from assistant messages: a
// call without arguments/input, with a blank or non-string id, or with a name
// that is blank, longer than 64 characters, not made of [A-Za-z0-9_-], or not
// in allowed (compared trimmed and case-insensitively; an allowlist without
// any non-blank name means no allowlist). Names with surrounding white space are trimmed. An assistant
// message left without blocks is removed. msgs is not modified; when nothing
// changes msgs itself is returned.
func RepairToolCallInputs(msgs []message.Message, allowed []string) ([]message.Message, ToolInputReport) {
	return repairToolCallInputs(msgs, newAllowSet(allowed), false)
}

func repairToolCallInputs(msgs []message.Message, allow allowSet, inPlace bool) ([]message.Message, ToolInputReport) {
	var rep ToolInputReport
	rw := rewriter{src: msgs, inPlace: inPlace}
	for i := range msgs {
		m := &msgs[i]
		var blocks []message.Block
		dropped := false
		if m.Role == message.RoleAssistant {
			for j := range m.Content.Blocks {
				b := &m.Content.Blocks[j]
				if !IsToolCall(b) {
					if blocks != nil {
						blocks = append(blocks, *b)
					}
					continue
				}
				keep, trimmed := checkCall(b, allow)
				if keep && trimmed == "" {
					if blocks != nil {
						blocks = append(blocks, *b)
					}
					continue
				}
				if blocks == nil {
					blocks = make([]message.Block, j, len(m.Content.Blocks))
					copy(blocks, m.Content.Blocks[:j])
				}
				if !keep {
					rep.DroppedToolCalls++
					dropped = true
					continue
				}
				nb := *b
				setCallName(&nb, trimmed)
				blocks = append(blocks, nb)
			}
		}
		if blocks == nil {
			rw.keep(i)
			continue
		}
		rep.Changed = true
		if dropped && len(blocks) == 0 {
			rep.DroppedAssistantMessages++
			rw.drop()
			continue
		}
		nm := *m
		nm.Content.Blocks = blocks
		nm.Content.SetPlain(false)
		rw.replace(nm)
	}
	out, _ := rw.result()
	return out, rep
}

// checkCall decides whether a tool call is kept and, when its name needs
// trimming, returns the trimmed name.
func checkCall(b *message.Block, allow allowSet) (keep bool, trimmed string) {
	if !hasCallInput(b) {
		return false, ""
	}
	id, ok := callID(b)
	if !ok || ecmatext.Trim(id) == "" {
		return false, ""
	}
	name, ok := callName(b)
	if !ok {
		return false, ""
	}
	t := ecmatext.Trim(name)
	if !validToolName(t) {
		return false, ""
	}
	if allow != nil {
		if _, ok := allow[strings.ToLower(t)]; !ok {
			return false, ""
		}
	}
	if t != name {
		return true, t
	}
	return true, ""
}
