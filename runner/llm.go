package runner

import (
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// pi's texts for summaries the model reads as user messages (convertToLlm).
const (
	compactionSummaryPrefix = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
	compactionSummarySuffix = "\n</summary>"
	branchSummaryPrefix     = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
	branchSummarySuffix     = "</summary>"
)

// toLLM converts session messages into what a model reads (pi's
// convertToLlm): summaries and custom messages become user messages; user,
// assistant and tool results pass through; anything else is dropped. It
// works in place: msgs is reused for the result.
func toLLM(msgs []message.Message) []message.Message {
	out := msgs[:0]
	for _, m := range msgs {
		switch m.Role {
		case message.RoleUser, message.RoleAssistant, message.RoleToolResult:
			out = append(out, m)
		case sessionfile.RoleCompactionSummary:
			s, _ := m.Extra["summary"].(string)
			out = append(out, message.Message{Role: message.RoleUser, Timestamp: m.Timestamp,
				Content: message.BlocksOf(message.Text(compactionSummaryPrefix + s + compactionSummarySuffix))})
		case sessionfile.RoleBranchSummary:
			s, _ := m.Extra["summary"].(string)
			out = append(out, message.Message{Role: message.RoleUser, Timestamp: m.Timestamp,
				Content: message.BlocksOf(message.Text(branchSummaryPrefix + s + branchSummarySuffix))})
		case sessionfile.RoleCustom:
			switch c := m.Extra["content"].(type) {
			case string:
				out = append(out, message.Message{Role: message.RoleUser, Timestamp: m.Timestamp, Content: message.PlainText(c)})
			}
		}
	}
	return out
}
