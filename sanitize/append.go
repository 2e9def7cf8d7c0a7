package sanitize

import (
	"slices"
	"strconv"
	"unsafe"

	"github.com/lanefleet/lanefleet/message"
)

// PrepareFinal is what the fleet hands a model of a history: the calls a
// provider would refuse noted (NoteRejectedCalls), the refusal trigger
// scrubbed (ScrubRefusalTrigger), then Prepare's final stage; when that is
// empty, the noted and scrubbed history. req.Messages is not modified.
func PrepareFinal(req Request) []message.Message {
	req.Messages = ScrubRefusalTrigger(req.Provider, NoteRejectedCalls(req.Messages))
	if res := Prepare(req); len(res.Final) > 0 {
		return res.Final
	}
	return req.Messages
}

// Appender keeps what PrepareFinal made of a history so that the same
// history followed by new messages is prepared by preparing only the new
// ones: a long session's turn does not sanitise its whole history again.
//
// It is used only where that gives PrepareFinal's very result, which its
// tests check against PrepareFinal for random histories and appends:
// every stage of Prepare then works message by message. A policy that
// rewrites tool-call ids (Anthropic, Mistral) is served: an id's new id
// depends only on the ids before it (first come, first served), so the
// mapper is kept with the history. Gemini's turn rules are served where
// they change nothing: no two replies in a row (with only roleless
// messages between them) to merge, and no reply first, which the
// bootstrap turn would precede. So it declines (Extend and With report
// false, and the caller prepares the whole history) for
//   - a history limit; an allowlist of tools; another model or limit
//     than the kept one (it starts over);
//   - for Google, a history that starts with a reply (the bootstrap turn
//     put before it carries the time) or has replies to merge;
//   - a history whose tool calls are not each followed at once by their
//     results, in order (what the pairing repair would change), a call a
//     provider would refuse (noted with its result), a prepared message
//     that would merge with the one before the new ones;
//   - where ids are rewritten, a call with an earlier call's id (the
//     rename uniqueCallIDs gives it avoids every id of the transcript,
//     later ones too) or an id whose rewriting took the time-stamped last
//     resort;
//   - a compaction summary after the first messages it kept, or a reply
//     the kept summary makes stale.
//
// The zero value is empty. An Appender is used by one caller at a time.
type Appender struct {
	key string
	n   int // the history messages prepared
	// out are their final messages. No array a hands out is written
	// again below the length it had as a's (Kept): a reset starts a new
	// array, and later messages go beyond.
	out []message.Message
	st  appendState
	// Declined counts the times it declined (tests).
	Declined int
}

// appendState is what preparing the next messages depends on.
type appendState struct {
	// pending are the ids of the last assistant message's calls whose
	// results have not come yet, in call order.
	pending []string
	// lastRole is the role of the last prepared message that has one.
	lastRole message.Role
	// summary: the history has a compaction summary, with that time
	// (summaryTS, when hasTS).
	summary, hasTS bool
	summaryTS      int64
	// ids maps the history's tool-call ids as a policy that rewrites
	// them did (nil: none), and calls are the call ids of its messages
	// as prepared; newIDs and newCalls are what the messages prepared
	// last added over them, added to them when they are kept (Extend).
	ids, newIDs     *idMapper
	calls, newCalls map[string]struct{}
	// idBytes is what ids and calls hold, by Bytes's estimate: counted
	// as they grow (keep), not walked at each read.
	idBytes int
}

// Len is the number of history messages a holds the preparation of.
func (a *Appender) Len() int { return a.n }

// Bytes estimates the memory a holds besides the strings and blocks it
// shares with the history: its array of prepared messages.
func (a *Appender) Bytes() int {
	return cap(a.out)*int(unsafe.Sizeof(message.Message{})) + cap(a.st.pending)*int(unsafe.Sizeof("")) + a.st.idBytes
}

// Estimated bytes of an entry of the id maps: a mapped id (besides its
// two strings' bytes), a rewritten id in use, a call id (besides its
// bytes).
const (
	mappedIDBytes = 64
	usedIDBytes   = 32
	callIDBytes   = 32
)

// keep adds the ids and calls the messages prepared last added (newIDs,
// newCalls) to st's, counting what they hold (idBytes).
func (st *appendState) keep() {
	if over := st.newIDs; over != nil {
		kept := st.ids
		if kept == nil {
			kept = &idMapper{} // nothing kept: over becomes the kept mapper
		}
		for k, v := range over.m {
			if _, ok := kept.m[k]; !ok {
				st.idBytes += len(k) + len(v) + mappedIDBytes
			}
		}
		for k := range over.used {
			if _, ok := kept.used[k]; !ok {
				st.idBytes += usedIDBytes
			}
		}
		if st.ids == nil {
			st.ids = over
		} else {
			st.ids.merge(over)
		}
	}
	if st.calls == nil {
		st.calls = map[string]struct{}{}
	}
	for id := range st.newCalls {
		if _, ok := st.calls[id]; !ok {
			st.idBytes += len(id) + callIDBytes
			st.calls[id] = struct{}{}
		}
	}
	st.newIDs, st.newCalls = nil, nil
}

// Kept is how many final messages a keeps for its history: the results
// of Extend and With start with them, and they are never written again.
func (a *Appender) Kept() int { return len(a.out) }

// Reset empties a, keeping nothing (its array is left to those who hold
// its messages).
func (a *Appender) Reset() {
	a.key, a.n, a.st, a.out = "", 0, appendState{}, nil
}

// Extend prepares req.Messages[a.Len():] after what a holds and keeps the
// result: req.Messages[:a.Len()] must be the very messages a prepared
// (the caller keeps them unchanged). It reports false, leaving a empty,
// when a cannot (see Appender); for another model or limit, a starts over
// from the first message.
func (a *Appender) Extend(req Request) bool {
	if a.key != appendKey(req) {
		a.Reset()
		a.key = appendKey(req)
	}
	out, st, ok := a.prepare(req)
	if !ok {
		a.Declined++
		a.Reset()
		return false
	}
	st.keep()
	a.out, a.st, a.n = out, st, len(req.Messages)
	return true
}

// With returns PrepareFinal's messages for req.Messages, whose first
// a.Len() must be the very messages a prepared, preparing only the rest
// and keeping nothing of them: ok is false when a cannot (then the caller
// prepares the whole history), or holds another model's or limit's. The
// result is valid until the next call of a: the new messages' go in the
// spare capacity of a's array.
func (a *Appender) With(req Request) (msgs []message.Message, ok bool) {
	if a.key != appendKey(req) || a.n > len(req.Messages) || a.n == 0 {
		a.Declined++
		return nil, false
	}
	out, _, ok := a.prepare(req)
	if !ok {
		a.Declined++
		return nil, false
	}
	if len(out) == 0 {
		return ScrubRefusalTrigger(req.Provider, req.Messages), true
	}
	return out, true
}

// appendKey names what a preparation depends on besides the messages.
func appendKey(req Request) string {
	return req.Provider + "\x00" + req.API + "\x00" + req.ModelID + "\x00" + strconv.Itoa(req.HistoryLimit)
}

// appendable reports whether pol and req prepare a history message by
// message (see Appender).
func appendable(pol Policy, req Request) bool {
	return req.HistoryLimit <= 0 && len(newAllowSet(req.AllowedToolNames)) == 0 && req.Policy == nil
}

// rewritesIDs reports whether pol rewrites tool-call ids (and renames
// duplicate calls: uniqueCallIDs).
func rewritesIDs(pol Policy) bool {
	return pol.SanitizeMode == ModeFull && pol.SanitizeToolCallIDs && pol.ToolCallIDMode != ""
}

// prepare prepares req.Messages[a.n:] after a's, appending them to a's
// array in its spare capacity (beyond len: a's own messages are left
// alone), and returns the whole and the state after them.
func (a *Appender) prepare(req Request) ([]message.Message, appendState, bool) {
	pol := PolicyFor(req.Provider, req.API, req.ModelID)
	if !appendable(pol, req) || a.n > len(req.Messages) {
		return nil, appendState{}, false
	}
	st := a.st
	st.pending = slices.Clone(st.pending)
	tail := req.Messages[a.n:]
	if len(tail) == 0 {
		return a.out, st, true
	}
	for i := range tail {
		if m := &tail[i]; m.Role == message.RoleAssistant && hasRejectedCall(m) {
			return nil, st, false // its note takes its result, wherever it is
		}
	}
	msgs := ScrubRefusalTrigger(req.Provider, tail)
	// Prepare's sanitising stages, in its order; those left out change
	// nothing of an appendable policy's history, or are checked below.
	msgs = annotateInterSession(msgs, false)
	rewrite := rewritesIDs(pol)
	if rewrite {
		// An id's new id depends only on the ids before it: the kept
		// mapper's, and the new ones' in a mapper of their own over it.
		st.newIDs = newIDMapper(pol.ToolCallIDMode, 0, a.st.ids)
		msgs, _ = mapToolCallIDs(msgs, st.newIDs, false)
		if st.newIDs.lastResort {
			return nil, st, false // a new id that depends on the time
		}
		pol.SanitizeToolCallIDs = false // done
	}
	msgs = sanitizeContent(msgs, pol, req.Images, 0, false)
	if pol.DropThinkingBlocks {
		msgs, _ = dropThinkingBlocks(msgs, false)
	}
	msgs, _ = repairToolCallInputs(msgs, nil, false)
	// The pairing repair leaves alone a history whose calls are each
	// followed at once by their results, in order, and whose results all
	// answer such a call (synthetic results would carry the time).
	for i := range msgs {
		if !st.pair(&msgs[i]) {
			return nil, st, false
		}
	}
	if pol.RepairToolUseResultPairing && len(st.pending) > 0 {
		return nil, st, false // the repair would add results the next messages may bring
	}
	if rewrite {
		// uniqueCallIDs renames a call whose id an earlier message's
		// call has, to an id unused in the whole transcript (later
		// messages' too): such a history is prepared whole.
		st.newCalls = map[string]struct{}{}
		for i := range msgs {
			m := &msgs[i]
			if m.Role != message.RoleAssistant {
				continue
			}
			var mine []string
			for j := range m.Content.Blocks {
				b := &m.Content.Blocks[j]
				if !IsToolCall(b) {
					continue
				}
				id, ok := callID(b)
				if !ok || id == "" {
					continue
				}
				_, seen := a.st.calls[id]
				if _, again := st.newCalls[id]; seen || again {
					return nil, st, false
				}
				mine = append(mine, id)
			}
			for _, id := range mine {
				st.newCalls[id] = struct{}{}
			}
		}
	}
	msgs = stripToolResultDetails(msgs, false)
	// Usage before the last compaction summary is zeroed: a summary is
	// only taken among the first messages, and no later reply may be
	// made stale by it.
	for i := range msgs {
		m := &msgs[i]
		if m.Role == roleCompactionSummary {
			if a.n > 0 {
				return nil, st, false
			}
			st.summary = true
			st.summaryTS, st.hasTS = messageTime(m)
		}
	}
	if a.n == 0 {
		msgs = zeroStaleUsage(msgs, false)
	} else if st.summary && st.hasTS {
		for i := range msgs {
			m := &msgs[i]
			if m.Role == message.RoleAssistant && m.Usage != nil {
				if ts, ok := messageTime(m); ok && ts <= st.summaryTS {
					return nil, st, false
				}
			}
		}
	}
	if req.API == "openai-responses" || req.API == "openai-codex-responses" {
		msgs = downgradeOpenAIReasoning(msgs, false)
	}
	first := message.Role("")
	for i := range msgs {
		if r := msgs[i].Role; r != "" {
			if first == "" {
				first = r
			}
			st.lastRole = r
		}
	}
	if pol.ApplyGoogleTurnOrdering && IsGoogleAPI(req.API) && len(a.out) == 0 && len(msgs) > 0 && msgs[0].Role == message.RoleAssistant {
		return nil, st, false // a bootstrap turn in front, stamped with the time
	}
	if pol.ValidateGeminiTurns {
		// A reply merged into the message before it (a roleless one
		// too, which then holds its calls: the pairing repair after the
		// merge drops their results) is prepared whole: no merge at all.
		if first == message.RoleAssistant && a.st.lastRole == message.RoleAssistant {
			return nil, st, false
		}
		if len(ValidateGeminiTurns(msgs)) != len(msgs) {
			return nil, st, false
		}
	}
	if pol.ValidateAnthropicTurns {
		if first == message.RoleUser && a.st.lastRole == message.RoleUser {
			return nil, st, false // it would merge with the message before
		}
		msgs = ValidateAnthropicTurns(msgs)
	}
	if st.lastRole == "" {
		st.lastRole = a.st.lastRole
	}
	out := a.out
	if cap(out)-len(out) < len(msgs)+appendRoom {
		// Room for the next messages too, so that a turn's With does
		// not copy the history's.
		out = slices.Grow(out, len(msgs)+appendRoom+len(out)/4)
	}
	return append(out, msgs...), st, true
}

// appendRoom is the spare room a preparation keeps for a turn's messages.
const appendRoom = 16

// pair advances the pairing state over m, a sanitised message: false when
// the pairing repair would change the history (a result that is not the
// next one its call awaits, a message between a call and its result, a
// call id twice in a message).
func (st *appendState) pair(m *message.Message) bool {
	if len(st.pending) > 0 {
		if m.Role != message.RoleToolResult || resultID(m) != st.pending[0] {
			return false
		}
		st.pending = st.pending[1:]
		return true
	}
	switch m.Role {
	case message.RoleToolResult:
		return false // an orphan, or a second result
	case message.RoleAssistant:
		for _, c := range pendingCalls(nil, m) {
			if slices.Contains(st.pending, c.id) {
				return false
			}
			st.pending = append(st.pending, c.id)
		}
	}
	return true
}
