package guard

import (
	"math"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// Per-request context guard constants (runtime spec §11.2).
const (
	// ContextNotice ends a tool result cut by the per-request guard.
	ContextNotice = "\n[truncated: output exceeded context limit]"
	// CompactedPlaceholder replaces a tool result dropped to free context.
	CompactedPlaceholder = "[compacted: tool output removed to free context]"

	imageChars          = 8000 // estimated characters of one image
	otherMessageChars   = 256  // estimated characters of a message of another role
	toolResultWeight    = 2.0  // tool results count double
	minGuardBudget      = 1024
	contextShare        = 0.75
	singleResultShare   = 0.5
	toolCharsPerToken   = 2
	newlineCutThreshold = 0.7
)

// Budgets are the per-request guard's limits in estimated characters.
type Budgets struct {
	// Context is the whole request: max(1024, floor(ctx*4*0.75)).
	Context int `json:"contextBudgetChars"`
	// SingleToolResult is one tool result: max(1024, floor(ctx*2*0.5)).
	SingleToolResult int `json:"maxSingleToolResultChars"`
}

// ContextBudgets returns the per-request guard budgets for a window of
// contextTokens.
func ContextBudgets(contextTokens int) Budgets {
	ctx := float64(max(1, contextTokens))
	return Budgets{
		Context:          max(minGuardBudget, int(math.Floor(ctx*CharsPerToken*contextShare))),
		SingleToolResult: max(minGuardBudget, int(math.Floor(ctx*toolCharsPerToken*singleResultShare))),
	}
}

// Outcome is what the per-request guard did to one message.
type Outcome string

// Outcomes of the per-request guard.
const (
	// OutcomeUnchanged: the text is as before (the message may still have
	// been rebuilt without details, see DetailsRemoved).
	OutcomeUnchanged Outcome = "unchanged"
	// OutcomeTruncated: the text was cut and ContextNotice appended.
	OutcomeTruncated Outcome = "truncatedWithNotice"
	// OutcomeNoticeOnly: an oversized result without text became the bare notice.
	OutcomeNoticeOnly Outcome = "noticeOnly"
	// OutcomeCompacted: the result was replaced by CompactedPlaceholder.
	OutcomeCompacted Outcome = "compactedPlaceholder"
)

// MessageOutcome reports the guard's action on one message.
type MessageOutcome struct {
	Outcome        Outcome
	DetailsRemoved bool
	KeptPrefix     int // UTF-16 units of the original text kept (truncated only)
}

// ContextResult is the outcome of GuardContext.
type ContextResult struct {
	Budgets  Budgets
	Messages []MessageOutcome // one per input message
	// Changed reports whether any message was rewritten.
	Changed bool
	// Estimate is the total estimated size after the guard ran.
	Estimate int
	// OverBudget reports that even after compaction the estimate exceeds
	// the context budget (the request will likely overflow).
	OverBudget bool
}

// GuardContext runs the per-request tool-result context guard over the
// messages about to be sent for a window of contextTokens. Pass 1 cuts each
// tool result whose weighted estimate exceeds the single-result budget;
// pass 2, when the total estimate exceeds the context budget, replaces tool
// results oldest first with CompactedPlaceholder until enough is freed.
// Rewritten results lose their details. The input is never modified; when
// nothing changes the returned slice is the input. The runner guards
// through Sizes.Guard, which measures only what changed and runs the same
// guardContext; GuardContext, with each message's outcome, is what the
// conformance cases pin (TestSizesGuardMatchesGuardContext ties the two).
func GuardContext(msgs []message.Message, contextTokens int) ([]message.Message, ContextResult) {
	res := ContextResult{Messages: make([]MessageOutcome, len(msgs))}
	for i := range res.Messages {
		res.Messages[i].Outcome = OutcomeUnchanged
	}
	est := make([]int, len(msgs))
	for i := range msgs {
		est[i] = EstimateChars(msgs[i])
	}
	out := guardContext(msgs, contextTokens, est, &res)
	return out, res
}

// guardContext is GuardContext given the estimate of every message in est,
// which it updates to the estimates after the guard; it records the
// outcome of each message in res.Messages unless that is nil.
func guardContext(msgs []message.Message, contextTokens int, est []int, res *ContextResult) []message.Message {
	b := ContextBudgets(contextTokens)
	res.Budgets = b
	out := msgs
	set := func(i int, m message.Message) {
		if !res.Changed {
			out = append([]message.Message(nil), msgs...)
			res.Changed = true
		}
		out[i] = m
	}
	outcome := func(i int) *MessageOutcome {
		if res.Messages == nil {
			return &MessageOutcome{}
		}
		return &res.Messages[i]
	}

	for i := range msgs {
		m := &msgs[i]
		if est[i] <= b.SingleToolResult || !IsToolResult(*m) {
			continue
		}
		o := outcome(i)
		text := joinedText(toolContent(*m))
		var nt string
		switch {
		case text == "":
			// The bare notice: no newline before it.
			nt = strings.TrimPrefix(ContextNotice, "\n")
			o.Outcome = OutcomeNoticeOnly
		case ecmatext.Len(text) <= b.SingleToolResult:
			nt = text
		default:
			var kept int
			nt, kept = cutForContext(text, b.SingleToolResult)
			o.Outcome = OutcomeTruncated
			o.KeptPrefix = kept
		}
		o.DetailsRemoved = details(*m) != nil
		nm := replaceToolText(*m, nt)
		set(i, nm)
		est[i] = EstimateChars(nm)
	}

	total := 0
	for _, e := range est {
		total += e
	}
	if total > b.Context {
		need := total - b.Context
		freed := 0
		placeholder := ecmatext.Len(CompactedPlaceholder)
		for i, m := range out {
			if freed >= need {
				break
			}
			if !IsToolResult(m) || est[i] <= placeholder {
				continue
			}
			o := outcome(i)
			o.DetailsRemoved = o.DetailsRemoved || details(m) != nil
			nm := replaceToolText(m, CompactedPlaceholder)
			after := EstimateChars(nm)
			freed += max(0, est[i]-after)
			total -= est[i] - after
			est[i] = after
			set(i, nm)
			o.Outcome = OutcomeCompacted
			o.KeptPrefix = 0
		}
	}
	res.Estimate = total
	res.OverBudget = total > b.Context
	return out
}

// cutForContext cuts text to budget units including ContextNotice; the cut
// moves back to the last newline when it lies beyond 70 % of the body.
func cutForContext(text string, budget int) (string, int) {
	body := max(0, budget-ecmatext.Len(ContextNotice))
	cut := body
	if nl := ecmatext.LastIndexByte(text, '\n', body); nl >= 0 && float64(nl) > newlineCutThreshold*float64(body) {
		cut = nl
	}
	p := ecmatext.Prefix(text, cut)
	kept := ecmatext.Len(p)
	return p + ContextNotice, kept
}

// replaceToolText rebuilds a tool result around one text: a plain string
// (or no content at all) becomes a plain string, a block list (even an
// empty one) one text block; details are dropped.
func replaceToolText(m message.Message, text string) message.Message {
	c := message.BlocksOf(message.Text(text))
	if old := toolContent(m); old.IsPlain() || old.Blocks == nil {
		c = message.PlainText(text)
	}
	return withoutDetails(withToolContent(m, c))
}

func joinedText(c message.Content) string {
	var parts []string
	for _, b := range c.Blocks {
		if b.Type == message.BlockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// EstimateChars estimates the size of one message as the per-request guard
// sees it: user text and other blocks by length (images 8000, other blocks
// their JSON), assistant text, thinking, tool-call arguments and the JSON
// of other blocks, tool results (text, images 8000, other blocks and
// details as JSON, a string of details by its length) counted double, any
// other message 256.
func EstimateChars(m message.Message) int {
	switch {
	case IsToolResult(m):
		n := 0
		for _, b := range toolContent(m).Blocks {
			switch b.Type {
			case message.BlockText:
				n += ecmatext.Len(b.Text)
			case message.BlockImage:
				n += imageChars
			default:
				n += jsonLen(b)
			}
		}
		switch d := details(m).(type) {
		case nil:
		case string:
			n += ecmatext.Len(d)
		default:
			n += jsonLen(d)
		}
		return max(n, int(math.Ceil(float64(n)*toolResultWeight)))
	case m.Role == message.RoleUser:
		n := 0
		for _, b := range m.Content.Blocks {
			switch b.Type {
			case message.BlockText:
				n += ecmatext.Len(b.Text)
			case message.BlockImage:
				n += imageChars
			default:
				n += jsonLen(b)
			}
		}
		return n
	case m.Role == message.RoleAssistant:
		n := 0
		for _, b := range m.Content.Blocks {
			switch b.Type {
			case message.BlockText:
				n += ecmatext.Len(b.Text)
			case message.BlockThinking:
				n += ecmatext.Len(b.Thinking)
			case message.BlockToolCall:
				if b.Arguments != nil {
					n += jsonLen(b.Arguments)
				} else {
					n += jsonLen(map[string]any{})
				}
			default:
				n += jsonLen(b)
			}
		}
		return n
	}
	return otherMessageChars
}

// jsonLen is the UTF-16 length of v as JavaScript's JSON.stringify writes
// it.
func jsonLen(v any) int {
	var buf [128]byte
	n := 0
	for _, r := range string(ecmatext.AppendJSON(buf[:0], v)) {
		n += ecmatext.RuneLen(r)
	}
	return n
}
