package compaction

import (
	"encoding/json"
	"strconv"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// Texts pi wraps summaries in when it hands them to the model.
const (
	compactionSummaryPrefix = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
	compactionSummarySuffix = "\n</summary>"
	branchSummaryPrefix     = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
	branchSummarySuffix     = "</summary>"
)

// ConvertToLLM turns a context built by sessionfile.Messages into the
// messages a provider accepts, as pi's convertToLlm does:
//
//   - compactionSummary: a user message "The conversation history before
//     this point was compacted into the following summary:" with the
//     summary in <summary> tags;
//   - branchSummary: a user message "The following is a summary of a branch
//     that this conversation came back from:" with the summary in <summary>
//     tags;
//   - custom: a user message with the same content;
//   - bashExecution: a user message "Ran `command`" with the output fenced,
//     the exit code, cancellation or truncation noted; dropped when
//     excludeFromContext is set;
//   - user, assistant, toolResult: passed through (sharing their content
//     with msgs);
//   - any other role: dropped.
//
// Converted messages keep their timestamp. The run loop calls it before
// every provider call; it is idempotent.
func ConvertToLLM(msgs []message.Message) []message.Message {
	out := make([]message.Message, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case message.RoleUser, message.RoleAssistant, message.RoleToolResult:
			out = append(out, *m)
		case sessionfile.RoleCompactionSummary:
			out = append(out, userText(compactionSummaryPrefix+extraString(*m, "summary")+compactionSummarySuffix, m.Timestamp))
		case sessionfile.RoleBranchSummary:
			out = append(out, userText(branchSummaryPrefix+extraString(*m, "summary")+branchSummarySuffix, m.Timestamp))
		case sessionfile.RoleCustom:
			out = append(out, message.Message{Role: message.RoleUser, Content: customContent(m.Extra["content"]), Timestamp: m.Timestamp})
		case RoleBashExecution:
			if exclude, _ := m.Extra["excludeFromContext"].(bool); exclude {
				continue
			}
			out = append(out, userText(bashText(m), m.Timestamp))
		}
	}
	return out
}

func userText(s string, ts int64) message.Message {
	return message.Message{Role: message.RoleUser, Content: message.BlocksOf(message.Text(s)), Timestamp: ts}
}

// customContent converts a custom message's content (a string or a list of
// text/image blocks in decoded JSON form) into a block list.
func customContent(v any) message.Content {
	switch c := v.(type) {
	case string:
		return message.BlocksOf(message.Text(c))
	case []any:
		data, err := json.Marshal(c)
		if err != nil {
			return message.BlocksOf()
		}
		var blocks []message.Block
		if err := json.Unmarshal(data, &blocks); err != nil {
			return message.BlocksOf()
		}
		return message.BlocksOf(blocks...)
	}
	return message.BlocksOf()
}

// bashText is pi's bashExecutionToText.
func bashText(m *message.Message) string {
	text := "Ran `" + extraString(*m, "command") + "`\n"
	if out := extraString(*m, "output"); out != "" {
		text += "```\n" + out + "\n```"
	} else {
		text += "(no output)"
	}
	if cancelled, _ := m.Extra["cancelled"].(bool); cancelled {
		text += "\n\n(command cancelled)"
	} else if code, ok := exitCode(m.Extra["exitCode"]); ok && code != "0" {
		text += "\n\nCommand exited with code " + code
	}
	if truncated, _ := m.Extra["truncated"].(bool); truncated {
		if path := extraString(*m, "fullOutputPath"); path != "" {
			text += "\n\n[Output truncated. Full output: " + path + "]"
		}
	}
	return text
}

// exitCode formats a decoded exit code as JavaScript prints a number.
func exitCode(v any) (string, bool) {
	switch n := v.(type) {
	case int64:
		return strconv.FormatInt(n, 10), true
	case int:
		return strconv.Itoa(n), true
	case float64:
		return string(ecmatext.AppendJSON(nil, n)), true
	}
	return "", false
}
