package sanitize

import (
	"slices"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// Custom session entry types the history preparation reads and writes.
const (
	// CustomModelSnapshot records the provider, API and model a session was
	// last prepared for.
	CustomModelSnapshot = "model-snapshot"
	// CustomGoogleBootstrap marks that a Google bootstrap turn was needed
	// once in this session.
	CustomGoogleBootstrap = "google-turn-ordering-bootstrap"
)

// GoogleBootstrapText is the content of the user turn put in front of a
// history that starts with an assistant message for Google APIs.
const GoogleBootstrapText = "(session bootstrap)"

// InterSessionPrefix starts the text of a user message that came from another
// session.
const InterSessionPrefix = "[Inter-session message]"

// CustomEntry is a custom session entry: a "custom" line of a pi session file
// with its customType and data.
type CustomEntry struct {
	CustomType string         `json:"customType"`
	Data       map[string]any `json:"data,omitempty"`
}

// Stage names a point of the history preparation.
type Stage string

// Stages of Prepare.
const (
	// StageSanitized is the history after sanitising, before turn
	// validation and limits.
	StageSanitized Stage = "sanitized"
	// StageFinal is what is handed to the model.
	StageFinal Stage = "final"
)

// Request is the input of Prepare.
type Request struct {
	// Provider, API and ModelID name the target model ("anthropic",
	// "anthropic-messages", "claude-opus-4-6").
	Provider, API, ModelID string
	// Messages is the stored history, oldest first. It is not modified.
	Messages []message.Message
	// AllowedToolNames, when it names at least one tool, drops tool calls
	// of any other tool (compared case-insensitively), as the reference
	// does with the tools of its run. The fleet's runner passes none: a
	// model that no longer sees its call of a tool not offered, and the
	// error it got, makes the call again (see NoteRejectedCalls).
	AllowedToolNames []string
	// HistoryLimit keeps only the last HistoryLimit user turns in the final
	// stage; ≤ 0 keeps everything.
	HistoryLimit int
	// Session holds the custom entries already in the session, oldest
	// first (the last model-snapshot and any google-turn-ordering-bootstrap
	// marker matter).
	Session []CustomEntry
	// Images bounds images in the history (zero fields take the defaults).
	Images ImageLimits
	// Now is the clock in Unix milliseconds for synthetic messages and
	// entries; 0 means time.Now.
	Now int64
	// Policy overrides PolicyFor(Provider, API, ModelID) when set.
	Policy *Policy
}

// Result is the output of Prepare. Sanitized and Final may share messages
// and content with each other and with the request (when nothing needed a
// change they are the request's Messages): do not modify them.
type Result struct {
	// Policy is the transcript policy that was applied.
	Policy Policy
	// Sanitized is the history after the sanitising stage.
	Sanitized []message.Message
	// Final is what is handed to the model.
	Final []message.Message
	// Appended holds the custom entries to append to the session.
	Appended []CustomEntry
}

// Messages returns the messages of stage s (StageFinal when s is empty).
func (r *Result) Messages(s Stage) []message.Message {
	if s == StageSanitized {
		return r.Sanitized
	}
	return r.Final
}

// Prepare runs the reference's history preparation for one model.
//
// The sanitized stage: inter-session annotation; image and content
// sanitising (with transcript-wide tool-call id rewriting in full mode);
// thinking-block dropping (Copilot Claude); malformed tool-call removal;
// pairing repair; new ids for call ids reused across messages (when ids are
// rewritten); tool-result details stripped; usage before the last
// compaction zeroed; OpenAI reasoning-only thinking dropped for the Responses
// APIs; a model snapshot entry when the model changed; a bootstrap user turn
// for Google APIs when the history starts with an assistant message.
//
// The final stage: Gemini and Anthropic turn validation, the history-turn
// limit and a second pairing repair.
func Prepare(req Request) Result {
	now := req.Now
	if now == 0 {
		now = time.Now().UnixMilli()
	}
	pol := PolicyFor(req.Provider, req.API, req.ModelID)
	if req.Policy != nil {
		pol = *req.Policy
	}
	res := Result{Policy: pol}

	// The sanitising stages copy the history on the first change (a
	// history that needs none, the usual one, is not copied at all) and
	// then work in place on that copy; blocks and maps stay shared with
	// the caller and are copied on write.
	msgs := req.Messages
	owned := false
	own := func(out []message.Message) []message.Message {
		owned = owned || !sameArray(out, msgs)
		return out
	}
	msgs = own(annotateInterSession(msgs, owned))
	msgs = own(sanitizeContent(msgs, pol, req.Images, now, owned))
	if pol.DropThinkingBlocks {
		out, _ := dropThinkingBlocks(msgs, owned)
		msgs = own(out)
	}
	out, _ := repairToolCallInputs(msgs, newAllowSet(req.AllowedToolNames), owned)
	msgs = own(out)
	if pol.RepairToolUseResultPairing {
		out, _ := RepairPairing(msgs, now)
		msgs = own(out)
	}
	if pol.SanitizeMode == ModeFull && pol.SanitizeToolCallIDs && pol.ToolCallIDMode != "" {
		// Providers whose ids are rewritten also reject duplicate ids.
		msgs = own(uniqueCallIDs(msgs, pol.ToolCallIDMode, owned))
	}
	msgs = own(stripToolResultDetails(msgs, owned))
	msgs = own(zeroStaleUsage(msgs, owned))
	if req.API == "openai-responses" || req.API == "openai-codex-responses" {
		msgs = own(downgradeOpenAIReasoning(msgs, owned))
	}
	if req.Provider != "" || req.API != "" || req.ModelID != "" {
		if snap, ok := snapshotEntry(req, now); ok {
			res.Appended = append(res.Appended, snap)
		}
	}
	if pol.ApplyGoogleTurnOrdering && IsGoogleAPI(req.API) && len(msgs) > 0 && msgs[0].Role == message.RoleAssistant {
		boot := message.User(GoogleBootstrapText, now)
		msgs = append([]message.Message{boot}, msgs...)
		if !hasCustom(req.Session, CustomGoogleBootstrap) {
			res.Appended = append(res.Appended, CustomEntry{CustomType: CustomGoogleBootstrap, Data: map[string]any{"timestamp": now}})
		}
	}
	if msgs == nil {
		msgs = []message.Message{}
	}
	res.Sanitized = msgs

	final := msgs
	if pol.ValidateGeminiTurns {
		final = ValidateGeminiTurns(final)
	}
	if pol.ValidateAnthropicTurns {
		final = ValidateAnthropicTurns(final)
	}
	final, _ = LimitHistoryTurns(final, req.HistoryLimit)
	if pol.RepairToolUseResultPairing {
		final, _ = RepairPairing(final, now)
	}
	res.Final = final
	return res
}

// sameArray reports whether a and b start at the same element (or are
// both empty): a stage that did not copy its input.
func sameArray(a, b []message.Message) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return &a[0] == &b[0]
}

func hasCustom(entries []CustomEntry, typ string) bool {
	for _, e := range entries {
		if e.CustomType == typ {
			return true
		}
	}
	return false
}

func snapshotEntry(req Request, now int64) (CustomEntry, bool) {
	var last map[string]any
	found := false
	for _, e := range req.Session {
		// An entry without data does not count, as in the reference.
		if e.CustomType == CustomModelSnapshot && e.Data != nil {
			last, found = e.Data, true
		}
	}
	str := func(k string) string { s, _ := last[k].(string); return s }
	if found && str("provider") == req.Provider && str("modelApi") == req.API && str("modelId") == req.ModelID {
		return CustomEntry{}, false
	}
	data := map[string]any{"timestamp": now}
	if req.Provider != "" {
		data["provider"] = req.Provider
	}
	if req.API != "" {
		data["modelApi"] = req.API
	}
	if req.ModelID != "" {
		data["modelId"] = req.ModelID
	}
	return CustomEntry{CustomType: CustomModelSnapshot, Data: data}, true
}

// interSessionPrefix returns the annotation for a user message's provenance,
// or "" when it did not come from another session.
func interSessionPrefix(m *message.Message) string {
	p, ok := m.Extra["provenance"].(map[string]any)
	if !ok || p["kind"] != "inter_session" {
		return ""
	}
	var b strings.Builder
	b.WriteString(InterSessionPrefix)
	for _, f := range [...]struct{ key, label string }{
		{"sourceSessionKey", "sourceSession"},
		{"sourceChannel", "sourceChannel"},
		{"sourceTool", "sourceTool"},
	} {
		if s, ok := p[f.key].(string); ok && ecmatext.Trim(s) != "" {
			b.WriteString(" " + f.label + "=" + ecmatext.Trim(s))
		}
	}
	return b.String()
}

// annotateInterSession prefixes user messages that came from another session.
func annotateInterSession(msgs []message.Message, inPlace bool) []message.Message {
	rw := rewriter{src: msgs, inPlace: inPlace}
	for i := range msgs {
		m := &msgs[i]
		prefix := ""
		if m.Role == message.RoleUser && m.Extra != nil {
			prefix = interSessionPrefix(m)
		}
		if prefix == "" {
			rw.keep(i)
			continue
		}
		nm := *m
		if m.Content.IsPlain() {
			text := m.Content.Text()
			if strings.HasPrefix(text, prefix) {
				rw.keep(i)
				continue
			}
			nm.Content = message.PlainText(prefix + "\n" + text)
		} else {
			first := slices.IndexFunc(m.Content.Blocks, func(b message.Block) bool { return b.Type == message.BlockText })
			if first >= 0 {
				if strings.HasPrefix(m.Content.Blocks[first].Text, prefix) {
					rw.keep(i)
					continue
				}
				blocks := copyBlocks(m.Content.Blocks)
				blocks[first].Text = prefix + "\n" + blocks[first].Text
				nm.Content = message.BlocksOf(blocks...)
			} else {
				blocks := make([]message.Block, 0, len(m.Content.Blocks)+1)
				blocks = append(blocks, message.Text(prefix))
				nm.Content = message.BlocksOf(append(blocks, m.Content.Blocks...)...)
			}
		}
		rw.replace(nm)
	}
	out, _ := rw.result()
	return out
}

// sanitizeContent is the reference's sanitizeSessionMessagesImages: tool-call
// ids (full mode), images everywhere, and in full mode thought signatures,
// blank text blocks and emptied assistant messages.
func sanitizeContent(msgs []message.Message, pol Policy, lim ImageLimits, now int64, inPlace bool) []message.Message {
	if pol.SanitizeMode == ModeFull && pol.SanitizeToolCallIDs && pol.ToolCallIDMode != "" {
		var changed bool
		msgs, changed = sanitizeToolCallIDs(msgs, pol.ToolCallIDMode, now, inPlace)
		inPlace = inPlace || changed
	}
	var sigOpts ThoughtSignatureOptions
	if pol.SanitizeThoughtSignatures != nil {
		sigOpts = *pol.SanitizeThoughtSignatures
	}
	rw := rewriter{src: msgs, inPlace: inPlace}
	withBlocks := func(m *message.Message, blocks []message.Block) {
		nm := *m
		nm.Content = message.BlocksOf(blocks...)
		rw.replace(nm)
	}
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Role == message.RoleToolResult:
			blocks, changed := SanitizeImageBlocks(m.Content.Blocks, LabelHistory, lim)
			if m.Content.IsPlain() {
				// A plain-string result becomes one text block (the
				// reference empties it).
				if m.Content.Text() == "" {
					blocks = nil
				}
				changed = true
			}
			if changed {
				withBlocks(m, blocks)
				continue
			}
		case m.Role == message.RoleUser && !m.Content.IsPlain(),
			m.Role == message.RoleAssistant && !m.Content.IsPlain() && (m.StopReason == message.StopError || pol.SanitizeMode != ModeFull):
			if blocks, changed := SanitizeImageBlocks(m.Content.Blocks, LabelHistory, lim); changed {
				withBlocks(m, blocks)
				continue
			}
		case m.Role == message.RoleAssistant && !m.Content.IsPlain():
			blocks := m.Content.Blocks
			changed := false
			if !pol.PreserveSignatures {
				blocks, changed = StripThoughtSignatures(blocks, sigOpts)
			}
			if slices.ContainsFunc(blocks, blankText) {
				blocks = slices.DeleteFunc(slices.Clone(blocks), blankText)
				changed = true
			}
			if b, ch := SanitizeImageBlocks(blocks, LabelHistory, lim); ch {
				blocks, changed = b, true
			}
			if len(blocks) == 0 {
				rw.drop()
				continue
			}
			if changed {
				withBlocks(m, blocks)
				continue
			}
		}
		rw.keep(i)
	}
	out, _ := rw.result()
	return out
}

func blankText(b message.Block) bool {
	return b.Type == message.BlockText && ecmatext.Trim(b.Text) == ""
}

func dropThinkingBlocks(msgs []message.Message, inPlace bool) ([]message.Message, bool) {
	isThinking := func(b message.Block) bool { return b.Type == message.BlockThinking }
	rw := rewriter{src: msgs, inPlace: inPlace}
	for i := range msgs {
		m := &msgs[i]
		if m.Role != message.RoleAssistant || m.Content.IsPlain() || !slices.ContainsFunc(m.Content.Blocks, isThinking) {
			rw.keep(i)
			continue
		}
		blocks := slices.DeleteFunc(slices.Clone(m.Content.Blocks), isThinking)
		if len(blocks) == 0 {
			blocks = []message.Block{message.Text("")}
		}
		nm := *m
		nm.Content = message.BlocksOf(blocks...)
		rw.replace(nm)
	}
	return rw.result()
}

func stripToolResultDetails(msgs []message.Message, inPlace bool) []message.Message {
	rw := rewriter{src: msgs, inPlace: inPlace}
	for i := range msgs {
		if msgs[i].Role != message.RoleToolResult || msgs[i].Details == nil {
			rw.keep(i)
			continue
		}
		nm := msgs[i]
		nm.Details = nil
		rw.replace(nm)
	}
	out, _ := rw.result()
	return out
}

// zeroUsage is the all-zero usage snapshot. Extra carries totalTokens so that
// the zero is written out, as the reference writes it.
func zeroUsage() *message.Usage {
	return &message.Usage{Extra: map[string]any{"totalTokens": int64(0)}}
}

// messageTime returns a message's timestamp in Unix ms: the numeric
// timestamp, or a date string in Extra.
func messageTime(m *message.Message) (int64, bool) {
	if m.Timestamp != 0 {
		return m.Timestamp, true
	}
	s, ok := m.Extra["timestamp"].(string)
	if !ok {
		return 0, false
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.000Z0700", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, ecmatext.Trim(s)); err == nil {
			return t.UnixMilli(), true
		}
	}
	return 0, false
}

// ZeroStaleUsage replaces the usage of every assistant message that comes
// before the last compaction summary, or whose timestamp is not after the
// summary's, by an all-zero snapshot: that usage describes a context that no
// longer exists. msgs is not modified; when nothing changes msgs itself is
// returned.
func ZeroStaleUsage(msgs []message.Message) []message.Message {
	return zeroStaleUsage(msgs, false)
}

func zeroStaleUsage(msgs []message.Message, inPlace bool) []message.Message {
	idx := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == roleCompactionSummary {
			idx = i
			break
		}
	}
	if idx < 0 {
		return msgs
	}
	summaryTS, hasTS := messageTime(&msgs[idx])
	rw := rewriter{src: msgs, inPlace: inPlace}
	for i := range msgs {
		m := &msgs[i]
		stale := false
		if m.Role == message.RoleAssistant && m.Usage != nil {
			stale = i < idx
			if !stale && hasTS {
				if ts, ok := messageTime(m); ok && ts <= summaryTS {
					stale = true
				}
			}
		}
		if !stale {
			rw.keep(i)
			continue
		}
		nm := *m
		nm.Usage = zeroUsage()
		rw.replace(nm)
	}
	out, _ := rw.result()
	return out
}

// DowngradeOpenAIReasoning removes, from assistant messages, thinking blocks
// that carry an OpenAI reasoning item signature ({"id": "rs_…", "type":
// "reasoning…"}) and are followed by no other kind of block: the Responses
// API rejects a reasoning item replayed without the output it led to. An
// assistant message left empty is removed. msgs is not modified; when nothing
// changes msgs itself is returned.
func DowngradeOpenAIReasoning(msgs []message.Message) []message.Message {
	return downgradeOpenAIReasoning(msgs, false)
}

func downgradeOpenAIReasoning(msgs []message.Message, inPlace bool) []message.Message {
	rw := rewriter{src: msgs, inPlace: inPlace}
	for i := range msgs {
		m := &msgs[i]
		var blocks []message.Block
		if m.Role == message.RoleAssistant && !m.Content.IsPlain() {
			bs := m.Content.Blocks
			// Blocks from lastOther+1 on are all thinking blocks.
			lastOther := -1
			for j := len(bs) - 1; j >= 0; j-- {
				if bs[j].Type != message.BlockThinking {
					lastOther = j
					break
				}
			}
			for j := lastOther + 1; j < len(bs); j++ {
				if isOpenAIReasoningSignature(thinkingSignature(&bs[j])) {
					if blocks == nil {
						blocks = slices.Clone(bs[:j])
					}
					continue
				}
				if blocks != nil {
					blocks = append(blocks, bs[j])
				}
			}
		}
		switch {
		case blocks == nil:
			rw.keep(i)
		case len(blocks) == 0:
			rw.drop()
		default:
			nm := *m
			nm.Content = message.BlocksOf(blocks...)
			rw.replace(nm)
		}
	}
	out, _ := rw.result()
	return out
}
