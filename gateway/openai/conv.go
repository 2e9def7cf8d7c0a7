package openai

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// Roles of a conversation item, the same for both wire APIs.
const (
	roleUser      = "user"
	roleAssistant = "assistant"
	roleTool      = "tool"
)

// item is one message of a conversation as both wire APIs carry it (chat
// messages, Responses input items) and as the transcript projects to it:
// what the client saw, not what the model saw.
type item struct {
	role   string
	text   string
	images []events.Image // user only
	calls  []call         // assistant only: client tool calls
	callID string         // tool only: the call it answers
}

// call is a client tool call.
type call struct {
	ID, Name, Arguments string
}

// Bounds of a request's conversation.
const (
	maxItems  = 4096 // messages or input items of one request
	maxImages = 16   // images of the new input
)

// convError is a request whose conversation the gateway refuses: status
// 400 (or 409 for a conversation that does not match the session's
// transcript), message safe to show.
type convError struct {
	status int
	param  string
	code   string
	msg    string
}

func (e *convError) Error() string { return e.msg }

func badParam(param, format string, args ...any) *convError {
	return &convError{status: 400, param: param, msg: fmt.Sprintf(format, args...)}
}

// split cuts a conversation into what came before (up to the last
// assistant message, included) and the new input after it: user
// messages and tool results, at least one.
func split(items []item, param string) (prior, input []item, err error) {
	last := -1
	for i, it := range items {
		if it.role == roleAssistant {
			last = i
		}
	}
	prior, input = items[:last+1], items[last+1:]
	if len(input) == 0 {
		return nil, nil, badParam(param, "the conversation must end with new input (a user message or tool results) after the last assistant message")
	}
	return prior, input, nil
}

// inbound is what the new input sends to the session.
type inbound struct {
	text    string
	images  []events.Image
	results []events.ToolResult
}

// newInput turns the new input into one inbound message: the user texts
// joined by blank lines, their images, the tool results.
func newInput(input []item, param string) (inbound, error) {
	var (
		in    inbound
		texts []string
	)
	for _, it := range input {
		switch it.role {
		case roleUser:
			if it.text != "" {
				texts = append(texts, it.text)
			}
			in.images = append(in.images, it.images...)
		case roleTool:
			in.results = append(in.results, events.ToolResult{ToolCallID: it.callID, Text: it.text})
		}
	}
	if len(in.images) > maxImages {
		return inbound{}, badParam(param, "at most %d images per request", maxImages)
	}
	in.text = strings.Join(texts, "\n\n")
	if in.text == "" && len(in.images) == 0 && len(in.results) == 0 {
		return inbound{}, badParam(param, "the new input is empty")
	}
	return in, nil
}

// clientCallIDs returns the ids of the client tool calls the conversation
// names: its assistant messages' calls and its tool results'.
func clientCallIDs(items []item) map[string]bool {
	ids := map[string]bool{}
	for _, it := range items {
		for _, c := range it.calls {
			ids[c.ID] = true
		}
		if it.callID != "" {
			ids[it.callID] = true
		}
	}
	return ids
}

// project turns a session's transcript (its current branch) into the
// conversation its client saw, compacted parts included: user messages; each run of assistant messages (with the worker's
// own tool calls and results between them) as one assistant message whose
// text is their texts and whose calls are the client tool calls among
// theirs (clientIDs); a tool result of a client call as a tool message.
// Assistant messages that failed or were aborted without text are left
// out: the client never saw them.
func project(entries []message.Entry, clientIDs map[string]bool) []item {
	var (
		out  []item
		open bool // out's last item is an assistant message still collecting
	)
	// The branch's message entries, all of them: a compaction changes
	// what the model sees, not the conversation the client saw.
	for _, e := range sessionfile.Branch(entries) {
		if e.Type != message.EntryMessage || e.Message == nil {
			continue
		}
		m := e.Message
		switch m.Role {
		case message.RoleUser:
			out, open = append(out, item{role: roleUser, text: m.Content.Text()}), false
		case message.RoleAssistant:
			text := strings.TrimSpace(m.Content.Text())
			var calls []call
			for _, b := range m.ToolCalls() {
				if clientIDs[b.ID] {
					calls = append(calls, call{ID: b.ID, Name: b.Name})
				}
			}
			if text == "" && len(calls) == 0 && (m.StopReason == message.StopError || m.StopReason == message.StopAborted) {
				continue
			}
			if !open {
				out, open = append(out, item{role: roleAssistant}), true
			}
			a := &out[len(out)-1]
			if text != "" {
				a.text = strings.TrimSpace(a.text + "\n\n" + text)
			}
			a.calls = append(a.calls, calls...)
		case message.RoleToolResult:
			if clientIDs[m.ToolCallID] {
				out, open = append(out, item{role: roleTool, callID: m.ToolCallID}), false
			}
		}
	}
	return out
}

// same reports whether a request's message and a transcript's say the
// same: the same role, user text, assistant text (compared word by word,
// so whitespace a client trims does not matter), client calls and result
// ids. Images and tool result texts are not compared: the transcript
// holds what the fleet stored of them.
func same(req, stored item) bool {
	if req.role != stored.role {
		return false
	}
	switch req.role {
	case roleUser:
		return strings.Join(strings.Fields(req.text), " ") == strings.Join(strings.Fields(stored.text), " ")
	case roleAssistant:
		if strings.Join(strings.Fields(req.text), " ") != strings.Join(strings.Fields(stored.text), " ") {
			return false
		}
		return slices.EqualFunc(req.calls, stored.calls, func(a, b call) bool { return a.ID == b.ID })
	default:
		return req.callID == stored.callID
	}
}

// matchTail checks that prior, the messages a request repeats, are the
// end of the session's conversation (its transcript projected): a client
// may send the whole conversation, its recent part, or none of it.
func matchTail(prior, stored []item) error {
	if len(prior) > len(stored) {
		return &convError{status: 409, param: "messages", code: "conversation_mismatch",
			msg: fmt.Sprintf("the request repeats %d earlier messages but the session holds %d: send only the new input, or the conversation as the session has it", len(prior), len(stored))}
	}
	tail := stored[len(stored)-len(prior):]
	for i := range prior {
		if !same(prior[i], tail[i]) {
			return &convError{status: 409, param: "messages", code: "conversation_mismatch",
				msg: fmt.Sprintf("earlier message %d (%s) differs from the session's transcript: send only the new input, or the conversation as the session has it", i, prior[i].role)}
		}
	}
	return nil
}

// importFile renders prior, the earlier conversation a request brings to
// a new session, as a pi session file the fleet imports as the session's
// transcript: user and assistant messages, the client tool calls and
// their results. model names the assistant messages' model.
func importFile(prior []item, model, param string, now time.Time) ([]byte, error) {
	ts := now.UTC().Format("2006-01-02T15:04:05.000Z")
	entries := []message.Entry{{Type: message.EntrySession, Version: message.SessionVersion, ID: sessionfile.NewSessionID(), Timestamp: ts}}
	parent := ""
	prov, id, _ := strings.Cut(model, "/")
	for _, it := range prior {
		m := message.Message{Timestamp: now.UnixMilli()}
		switch it.role {
		case roleUser:
			m.Role = message.RoleUser
			if len(it.images) == 0 {
				m.Content = message.PlainText(it.text)
			} else {
				var blocks []message.Block
				if it.text != "" {
					blocks = append(blocks, message.Text(it.text))
				}
				for _, img := range it.images {
					blocks = append(blocks, message.Image(img.MimeType, img.Data))
				}
				m.Content = message.BlocksOf(blocks...)
			}
		case roleAssistant:
			m.Role, m.Provider, m.Model, m.API = message.RoleAssistant, prov, id, "openai-compatible"
			m.StopReason = message.StopStop
			m.Usage = &message.Usage{}
			var blocks []message.Block
			if it.text != "" {
				blocks = append(blocks, message.Text(it.text))
			}
			for _, c := range it.calls {
				args := map[string]any{}
				if c.Arguments != "" {
					if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
						return nil, badParam(param, "tool call %q: arguments are not a JSON object", c.ID)
					}
				}
				blocks = append(blocks, message.ToolCall(c.ID, c.Name, args))
			}
			if len(it.calls) > 0 {
				m.StopReason = message.StopToolUse
			}
			m.Content = message.BlocksOf(blocks...)
		case roleTool:
			m.Role, m.ToolCallID = message.RoleToolResult, it.callID
			m.ToolName = toolName(prior, it.callID)
			m.Content = message.BlocksOf(message.Text(it.text))
		}
		e := message.Entry{Type: message.EntryMessage, ID: sessionfile.NewEntryID(), Timestamp: ts, Message: &m}
		if parent != "" {
			p := parent
			e.ParentID = &p
		}
		parent = e.ID
		entries = append(entries, e)
	}
	var sb strings.Builder
	if err := sessionfile.WriteEntries(&sb, entries); err != nil {
		return nil, fmt.Errorf("openai: render the conversation: %w", err)
	}
	return []byte(sb.String()), nil
}

// toolName is the name of the call id among the conversation's calls.
func toolName(items []item, id string) string {
	for _, it := range items {
		for _, c := range it.calls {
			if c.ID == id {
				return c.Name
			}
		}
	}
	return ""
}

// dataImage decodes a data: URL of a base64 image, the only image form the
// gateway takes (it fetches nothing).
func dataImage(param, url string) (events.Image, error) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return events.Image{}, badParam(param, "only data: URLs of base64 images are accepted (the gateway fetches no URL)")
	}
	meta, data, ok := strings.Cut(rest, ",")
	mime, isB64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isB64 || !strings.HasPrefix(mime, "image/") {
		return events.Image{}, badParam(param, "an image must be a data:image/...;base64, URL")
	}
	if _, err := base64.StdEncoding.DecodeString(data); err != nil {
		return events.Image{}, badParam(param, "the image's base64 data does not decode")
	}
	return events.Image{MimeType: mime, Data: data}, nil
}
