package sanitize

import "github.com/lanefleet/lanefleet/message"

// MissingToolResultText is the text of a synthetic tool result inserted for a
// tool call whose result is missing from the history.
const MissingToolResultText = "[openclaw] missing tool result in session history; inserted synthetic error result for transcript repair."

// PairingReport says what RepairPairing did.
type PairingReport struct {
	// Changed is true when the output differs from the input, or when the
	// reference would report a change (see Moved).
	Changed bool
	// AddedSyntheticFor lists the call ids that got a synthetic result, in
	// order.
	AddedSyntheticFor []string
	// DroppedDuplicateCount counts results dropped because the same
	// assistant message already got a result for that id.
	DroppedDuplicateCount int
	// DroppedOrphanCount counts results that answer no call of the assistant
	// message before them.
	DroppedOrphanCount int
	// Moved is true when anything changed or when an assistant's span held
	// both a matched result and another message (which the reference reports
	// as moved even when the order stays the same).
	Moved bool
}

// SyntheticToolResult returns the error result inserted for a call without
// one. An empty name becomes "unknown".
func SyntheticToolResult(callID, toolName string, now int64) message.Message {
	if toolName == "" {
		toolName = "unknown"
	}
	return message.Message{
		Role:       message.RoleToolResult,
		ToolCallID: callID,
		ToolName:   toolName,
		Content:    message.BlocksOf(message.Text(MissingToolResultText)),
		IsError:    true,
		Timestamp:  now,
	}
}

// callRef is a tool call of an assistant message and, once its span is
// matched, the index of its result.
type callRef struct {
	id     string
	name   string
	result int // index in msgs of its first result, -1 if none
}

// RepairPairing makes every tool call of an assistant message be followed
// directly by exactly one result, in call order, as the reference's
// repairToolUseResultPairing does (runtime spec §7.2):
//
//   - the first result in the assistant's span (the messages up to the next
//     assistant) that answers one of its calls is moved right after it;
//     later results for the same call in the span are discarded silently;
//   - a call without a result gets SyntheticToolResult (timestamp now);
//   - any other result (before the first assistant, after an assistant
//     without calls or with stopReason error/aborted, answering a call of
//     another message, or without an id) is dropped as an orphan;
//   - the other messages of the span follow the results in their order;
//   - a call id that appears twice in one message gets one result.
//
// As in the reference, the input is returned as it is unless something was
// dropped or synthesised, or a span held both a matched result and another
// message: so results out of order, or a second result for a call, in a
// span that ends the transcript are left alone (the next message of a turn
// always ends that span). Unlike the reference, a call id reused by a later
// assistant message keeps that message's result (DEVIATIONS). msgs is not
// modified.
func RepairPairing(msgs []message.Message, now int64) ([]message.Message, PairingReport) {
	p := pairing{out: lazyCopy{src: msgs}, now: now}
	for i := 0; i < len(msgs); {
		i = p.place(i)
	}
	if !p.changed {
		return msgs, p.rep
	}
	p.rep.Changed = true
	p.rep.Moved = true
	return p.out.result(), p.rep
}

// pairing is the state of one RepairPairing: the output, the report, and
// the calls of the current assistant span (a buffer reused from span to
// span).
type pairing struct {
	out     lazyCopy
	rep     PairingReport
	changed bool
	now     int64 // the timestamp of synthetic results

	calls []callRef
	index map[string]int // call id -> its first call, for many calls
}

// place places msgs[i] and, for an assistant message with calls, its span,
// and returns the index of the next message to place. A result outside a
// span is an orphan.
func (p *pairing) place(i int) int {
	m := &p.out.src[i]
	switch m.Role {
	case message.RoleAssistant:
	case message.RoleToolResult:
		p.rep.DroppedOrphanCount++
		p.changed = true
		return i + 1
	default:
		p.out.keep(i)
		return i + 1
	}
	p.calls = pendingCalls(p.calls[:0], m)
	if len(p.calls) == 0 {
		p.out.keep(i)
		return i + 1
	}
	end := p.match(i)
	p.out.keep(i)
	p.answer()
	p.keepOthers(i+1, end)
	return end
}

// pendingCalls appends to dst the calls of assistant message m that want a
// result: none when m stopped on an error or was aborted.
func pendingCalls(dst []callRef, m *message.Message) []callRef {
	if m.StopReason == message.StopError || m.StopReason == message.StopAborted {
		return dst
	}
	return appendCalls(dst, m)
}

// appendCalls appends the tool calls of an assistant message that have a
// non-empty string id.
func appendCalls(dst []callRef, m *message.Message) []callRef {
	for i := range m.Content.Blocks {
		b := &m.Content.Blocks[i]
		if !IsToolCall(b) {
			continue
		}
		id, ok := callID(b)
		if !ok || id == "" {
			continue
		}
		name, _ := callName(b)
		dst = append(dst, callRef{id: id, name: name, result: -1})
	}
	return dst
}

// match reads the span of the assistant message at i (the messages up to
// the next assistant) and returns where it ends: each call's first result
// is its result (later ones are discarded without a report), and a result
// that answers none of the calls is dropped as an orphan. A span that holds
// both a matched result and another message is a change, as the reference
// reports it.
func (p *pairing) match(i int) int {
	p.indexCalls()
	matched, others := false, false
	j := i + 1
	for ; j < len(p.out.src); j++ {
		m := &p.out.src[j]
		if m.Role == message.RoleAssistant {
			break
		}
		if m.Role != message.RoleToolResult {
			others = true
			continue
		}
		k := p.callOf(resultID(m))
		if k < 0 {
			p.rep.DroppedOrphanCount++
			p.changed = true
			continue
		}
		matched = true
		if p.calls[k].result < 0 {
			p.calls[k].result = j
		}
	}
	if matched && others {
		p.changed = true
	}
	return j
}

// keepOthers keeps, in their order, the messages of the span msgs[from:to]
// that are not tool results.
func (p *pairing) keepOthers(from, to int) {
	for j := from; j < to; j++ {
		if p.out.src[j].Role != message.RoleToolResult {
			p.out.keep(j)
		}
	}
}

// indexCalls indexes the calls by id when there are many, so that a span
// is matched in linear time.
func (p *pairing) indexCalls() {
	p.index = nil
	if len(p.calls) <= 16 {
		return
	}
	p.index = make(map[string]int, len(p.calls))
	for c := len(p.calls) - 1; c >= 0; c-- {
		p.index[p.calls[c].id] = c
	}
}

// callOf returns the first call with id, or -1 (always for "").
func (p *pairing) callOf(id string) int {
	switch {
	case id == "":
	case p.index != nil:
		if c, ok := p.index[id]; ok {
			return c
		}
	default:
		for c := range p.calls {
			if p.calls[c].id == id {
				return c
			}
		}
	}
	return -1
}

// answer places each call's result after its assistant message, in call
// order: the one match found, or a synthetic one. A call whose id an
// earlier call of the message has gets none (a duplicate); without a
// result it is reported as synthesised too, as the reference does.
func (p *pairing) answer() {
	for c, call := range p.calls {
		first := p.callOf(call.id)
		if p.calls[first].result < 0 {
			p.rep.AddedSyntheticFor = append(p.rep.AddedSyntheticFor, call.id)
			p.changed = true
		}
		if first != c {
			p.rep.DroppedDuplicateCount++
			p.changed = true
			continue
		}
		if call.result >= 0 {
			p.out.keep(call.result)
			continue
		}
		p.out.add(SyntheticToolResult(call.id, call.name, p.now))
	}
}

// lazyCopy is an output built from src that shares src while it is a
// prefix of it (src[:n]), and copies it at the first message out of place:
// a transcript that needs no repair costs no allocation.
type lazyCopy struct {
	src []message.Message
	out []message.Message // nil while the output is src[:n]
	n   int
}

// keep appends src[i].
func (l *lazyCopy) keep(i int) {
	if l.out == nil && i == l.n {
		l.n++
		return
	}
	l.add(l.src[i])
}

// add appends m, a message not at its place in src.
func (l *lazyCopy) add(m message.Message) {
	if l.out == nil {
		l.out = make([]message.Message, l.n, len(l.src)+8)
		copy(l.out, l.src[:l.n])
	}
	l.out = append(l.out, m)
}

// result returns the output: a prefix of src (its capacity cut, so an
// append cannot write over src) or the copy.
func (l *lazyCopy) result() []message.Message {
	if l.out == nil {
		return l.src[:l.n:l.n]
	}
	return l.out
}
