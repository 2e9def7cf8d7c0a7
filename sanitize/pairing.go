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

type callRef struct {
	id   string
	name string
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
		dst = append(dst, callRef{id: id, name: name})
	}
	return dst
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
	var rep PairingReport
	changed := false
	// While the output is msgs[:n] nothing is allocated.
	var out []message.Message
	n := 0
	materialize := func() {
		if out == nil {
			out = make([]message.Message, n, len(msgs)+8)
			copy(out, msgs[:n])
		}
	}
	push := func(src int) {
		if out == nil && src == n {
			n++
			return
		}
		materialize()
		out = append(out, msgs[src])
	}
	var (
		calls     []callRef
		found     []int // per call: index in msgs of its result, -1 if none
		remainder []int
	)
	for i := 0; i < len(msgs); i++ {
		m := &msgs[i]
		if m.Role != message.RoleAssistant {
			if m.Role == message.RoleToolResult {
				rep.DroppedOrphanCount++
				changed = true
				continue
			}
			push(i)
			continue
		}
		calls = calls[:0]
		if m.StopReason != message.StopError && m.StopReason != message.StopAborted {
			calls = appendCalls(calls, m)
		}
		if len(calls) == 0 {
			push(i)
			continue
		}
		found = found[:0]
		for range calls {
			found = append(found, -1)
		}
		remainder = remainder[:0]
		// Many calls in one message: index them so the span stays linear.
		var index map[string]int
		if len(calls) > 16 {
			index = make(map[string]int, len(calls))
			for c := len(calls) - 1; c >= 0; c-- {
				index[calls[c].id] = c
			}
		}
		matched := false
		j := i + 1
		for ; j < len(msgs); j++ {
			n := &msgs[j]
			if n.Role == message.RoleAssistant {
				break
			}
			if n.Role != message.RoleToolResult {
				remainder = append(remainder, j)
				continue
			}
			id := resultID(n)
			k := -1
			switch {
			case id == "":
			case index != nil:
				if c, ok := index[id]; ok {
					k = c
				}
			default:
				for c := range calls {
					if calls[c].id == id {
						k = c
						break
					}
				}
			}
			if k < 0 {
				rep.DroppedOrphanCount++
				changed = true
				continue
			}
			matched = true
			if found[k] < 0 {
				// Only the first result of a call counts; later ones are
				// discarded without a report.
				found[k] = j
			}
		}
		if matched && len(remainder) > 0 {
			changed = true
		}
		push(i)
		for c, call := range calls {
			// The first call of an id holds its result.
			first := c
			if index != nil {
				first = index[call.id]
			} else {
				for e := range c {
					if calls[e].id == call.id {
						first = e
						break
					}
				}
			}
			if found[first] < 0 {
				rep.AddedSyntheticFor = append(rep.AddedSyntheticFor, call.id)
				changed = true
			}
			if first != c {
				// The same id called twice in one message: one result only.
				rep.DroppedDuplicateCount++
				changed = true
				continue
			}
			if found[c] >= 0 {
				push(found[c])
				continue
			}
			materialize()
			out = append(out, SyntheticToolResult(call.id, call.name, now))
		}
		for _, r := range remainder {
			push(r)
		}
		i = j - 1
	}
	if !changed {
		return msgs, rep
	}
	rep.Changed = true
	rep.Moved = true
	if out == nil {
		// Only messages at the end were dropped.
		return msgs[:n:n], rep
	}
	return out, rep
}
