package replytext

import (
	"encoding/json"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// Payload is one reply item of a finished run.
type Payload struct {
	Text           string   `json:"text,omitempty"`
	MediaURL       string   `json:"mediaUrl,omitempty"`
	MediaURLs      []string `json:"mediaUrls,omitempty"`
	ReplyToID      string   `json:"replyToId,omitempty"`
	ReplyToTag     bool     `json:"replyToTag,omitempty"`
	ReplyToCurrent bool     `json:"replyToCurrent,omitempty"`
	AudioAsVoice   bool     `json:"audioAsVoice,omitempty"`
	IsError        bool     `json:"isError,omitempty"`
}

// Reply is a text split into its reply directives (media, reply-to, audio
// as voice) and the remaining text.
type Reply struct {
	Text           string
	MediaURLs      []string
	AudioAsVoice   bool
	ReplyToID      string
	ReplyToTag     bool
	ReplyToCurrent bool
}

// ToolError is the last failing tool of an attempt (see ToolErrors).
type ToolError struct {
	// Name is the tool name.
	Name string
	// Summary is the tool's display summary ("read ~/notes.md"); empty
	// means Name, with ": "+Meta when Meta is set.
	Summary string
	// Meta is the tool's short description of the call, if any.
	Meta string
	// Error is the normalised error text (ToolErrorMessage).
	Error string
	// Mutating marks a tool that changes state (writes, sends); its
	// failure is always reported.
	Mutating bool
}

// GenericErrorText is the reference's generic assistant error text.
const GenericErrorText = "The AI service returned an error. Please try again."

// PayloadInput is everything BuildPayloads needs.
type PayloadInput struct {
	// AssistantTexts are the texts streamed during the run (block replies
	// or final texts), in order.
	AssistantTexts []string
	// LastAssistant is the run's last assistant message, if any.
	LastAssistant *message.Message
	// ErrorText is the user-facing text for LastAssistant's error (from
	// the error classifier); empty when it did not fail.
	ErrorText string
	// FormattedRawError is the raw error message as the UI shows it, if
	// the caller has it (optional; used to spot repeated errors).
	FormattedRawError string
	// LastToolError is the last failing tool, if any.
	LastToolError *ToolError
	// Verbose adds the error text to tool error warnings and reports exec
	// and bash failures too.
	Verbose bool
	// SuppressToolErrorWarnings hides every tool error warning (e.g. for
	// heartbeat runs).
	SuppressToolErrorWarnings bool
	// SuppressToolErrors is messages.suppressToolErrors: hides warnings of
	// non-mutating tools.
	SuppressToolErrors bool
	// Directives parses reply directives out of a text; nil keeps texts
	// as they are.
	Directives func(text string) Reply
}

var recoverableHints = []string{"required", "missing", "invalid", "must be", "must have", "needs", "requires"}

// BuildPayloads assembles a run's reply payloads, in order: the assistant
// error, the answer texts (AssistantTexts, else the
// last assistant's text; texts that only repeat the error are dropped when
// the last assistant errored), then a tool error warning "⚠️ <tool>
// failed[: <error>]" when warranted. Texts are trimmed; items with neither
// text nor media, and items that are exactly NO_REPLY, are dropped.
func BuildPayloads(in PayloadInput) []Payload {
	var items []payloadItem
	if in.ErrorText != "" {
		items = append(items, payloadItem{Reply: Reply{Text: in.ErrorText}, isError: true})
	}
	items = appendAnswers(items, in)
	if text, ok := toolErrorWarning(in, items); ok {
		items = append(items, payloadItem{Reply: Reply{Text: text}, isError: true})
	}
	return payloads(items)
}

// payloadItem is a reply item before it becomes a Payload.
type payloadItem struct {
	Reply
	isError bool
}

// appendAnswers appends the answer texts to items: AssistantTexts, else the
// last assistant's text; a text that repeats the error of an errored last
// assistant, and one that is left with neither text, media nor audio once
// its directives are parsed, is dropped.
func appendAnswers(items []payloadItem, in PayloadInput) []payloadItem {
	parse := in.Directives
	if parse == nil {
		parse = func(t string) Reply { return Reply{Text: t} }
	}
	echo := newErrorEcho(in)
	answers := in.AssistantTexts
	if len(answers) == 0 && in.LastAssistant != nil {
		if t := in.LastAssistant.Content.Text(); t != "" {
			answers = []string{t}
		}
	}
	for _, t := range answers {
		if echo.repeats(t) {
			continue
		}
		r := parse(t)
		if r.Text == "" && len(r.MediaURLs) == 0 && !r.AudioAsVoice {
			continue
		}
		items = append(items, payloadItem{Reply: r})
	}
	return items
}

// errorEcho recognises a text that only repeats the error of a run whose
// last assistant errored.
type errorEcho struct {
	errored   bool
	errorText string // the user-facing error text
	rawErr    string // the last assistant's error message, trimmed
	formatted string // the raw error as the UI shows it
}

// newErrorEcho returns the echo check of in's error.
func newErrorEcho(in PayloadInput) errorEcho {
	last := in.LastAssistant
	e := errorEcho{errored: last != nil && last.StopReason == message.StopError, errorText: in.ErrorText, formatted: in.FormattedRawError}
	if e.errored {
		e.rawErr = ecmatext.Trim(last.ErrorMessage)
	}
	return e
}

// repeats reports whether text repeats the error: the same as the error
// text, the generic error text, the raw or formatted error (or the same
// once normalised), or any raw provider error payload.
func (e errorEcho) repeats(text string) bool {
	if !e.errored {
		return false
	}
	t := ecmatext.Trim(text)
	if t == "" {
		return false
	}
	norm := NormalizeForComparison(t)
	if e.errorText != "" {
		if norm != "" && norm == NormalizeForComparison(e.errorText) {
			return true
		}
		if t == GenericErrorText {
			return true
		}
	}
	if e.rawErr != "" {
		if t == e.rawErr || (norm != "" && norm == NormalizeForComparison(e.rawErr)) {
			return true
		}
		if fp := apiErrorFingerprint(e.rawErr); fp != "" && fp == apiErrorFingerprint(t) {
			return true
		}
	}
	if e.formatted != "" {
		if t == e.formatted || (norm != "" && norm == NormalizeForComparison(e.formatted)) {
			return true
		}
	}
	return apiErrorFingerprint(t) != ""
}

// toolErrorWarning returns the warning "⚠️ <tool> failed[: <error>]" for
// the last tool error when it is warranted: never for sessions_send, nor
// for exec and bash unless verbose, nor when suppressed; always for a
// mutating tool; for another only when the run has no reply, the error does
// not look recoverable ("required", "missing", …), and SuppressToolErrors
// is off. A warning that items already hold is not repeated.
func toolErrorWarning(in PayloadInput, items []payloadItem) (string, bool) {
	te := in.LastToolError
	if te == nil || in.SuppressToolErrorWarnings {
		return "", false
	}
	name := strings.ToLower(strings.TrimSpace(te.Name))
	if name == "sessions_send" || ((name == "exec" || name == "bash") && !in.Verbose) {
		return "", false
	}
	if !te.Mutating {
		last := in.LastAssistant
		hasReply := len(items) > 0 && !(last != nil && (len(last.ToolCalls()) > 0 || last.StopReason == message.StopToolUse))
		if hasReply || recoverable(te.Error) || in.SuppressToolErrors {
			return "", false
		}
	}
	summary := te.Summary
	if summary == "" {
		summary = te.Name
		if te.Meta != "" {
			summary += ": " + te.Meta
		}
	}
	text := "⚠️ " + summary + " failed"
	if in.Verbose && te.Error != "" {
		text += ": " + te.Error
	}
	for _, it := range items {
		if ecmatext.Trim(it.Text) == text {
			return "", false
		}
	}
	return text, true
}

// recoverable reports whether a tool error reads as one the model can fix
// by itself (a missing or invalid argument).
func recoverable(errText string) bool {
	lower := strings.ToLower(errText)
	for _, h := range recoverableHints {
		if strings.Contains(lower, h) {
			return true
		}
	}
	return false
}

// payloads turns items into payloads: texts trimmed, the first media URL
// as MediaURL, audio as voice on every item with media when any item asks
// for it, and items with neither text nor media, or exactly NO_REPLY,
// dropped.
func payloads(items []payloadItem) []Payload {
	audio := false
	for _, it := range items {
		audio = audio || it.AudioAsVoice
	}
	out := make([]Payload, 0, len(items))
	for _, it := range items {
		p := Payload{
			Text:           ecmatext.Trim(it.Text),
			MediaURLs:      it.MediaURLs,
			ReplyToID:      it.ReplyToID,
			ReplyToTag:     it.ReplyToTag,
			ReplyToCurrent: it.ReplyToCurrent,
			IsError:        it.isError,
			AudioAsVoice:   it.AudioAsVoice || (audio && len(it.MediaURLs) > 0),
		}
		if len(p.MediaURLs) > 0 {
			p.MediaURL = p.MediaURLs[0]
		} else {
			p.MediaURLs = nil
		}
		if p.Text == "" && p.MediaURL == "" {
			continue
		}
		if p.Text != "" && IsSilent(p.Text) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// apiErrorFingerprint recognises a raw provider error payload (a JSON object
// with an "error" object carrying a type or message, optionally behind an
// "Error: " or HTTP status prefix) and returns a fingerprint of its type and
// message, or "" when text is not one.
func apiErrorFingerprint(text string) string {
	t := ecmatext.Trim(text)
	i := strings.IndexByte(t, '{')
	if i < 0 || !strings.HasSuffix(t, "}") || i > 32 {
		return ""
	}
	var obj map[string]any
	if json.Unmarshal([]byte(t[i:]), &obj) != nil {
		return ""
	}
	e, ok := obj["error"].(map[string]any)
	if !ok {
		return ""
	}
	typ, _ := e["type"].(string)
	msg, _ := e["message"].(string)
	if typ == "" && msg == "" {
		return ""
	}
	return typ + "\x00" + msg
}
