package guard

import (
	"math"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// Truncation constants (runtime spec §11.1, §11.3).
const (
	// HardMaxToolResultChars caps every tool result, in UTF-16 units, both at
	// write time and during overflow recovery.
	HardMaxToolResultChars = 400_000
	// MinKeepChars is the smallest prefix a truncation keeps; it wins over
	// the budget, so truncated output can exceed its budget.
	MinKeepChars = 2_000
	// ToolResultContextShare is the share of the context window one tool
	// result may take during overflow recovery.
	ToolResultContextShare = 0.3
	// CharsPerToken is the character estimate of one token.
	CharsPerToken = 4

	// TruncationNotice is appended to a tool result cut during overflow
	// recovery (217 UTF-16 units).
	TruncationNotice = "\n\n⚠️ [Content truncated — original was too large for the model's context window. The content above is a partial view. If you need more, request specific sections or use offset/limit parameters to read smaller chunks.]"
	// PersistenceNotice is appended to a tool result cut before it is
	// written to the session (151 UTF-16 units).
	PersistenceNotice = "\n\n⚠️ [Content truncated during persistence — original exceeded size limit. Use offset/limit parameters or request specific sections for large content.]"
)

// MaxToolResultChars returns the largest tool result, in UTF-16 units, that
// overflow recovery leaves alone for a window of contextTokens:
// min(400000, floor(contextTokens*0.3)*4).
func MaxToolResultChars(contextTokens int) int {
	n := int(math.Floor(float64(contextTokens)*ToolResultContextShare)) * CharsPerToken
	return max(0, min(HardMaxToolResultChars, n))
}

// TruncateOptions tune a truncation. The zero value means TruncationNotice
// and MinKeepChars.
type TruncateOptions struct {
	Notice  string // appended after the kept prefix; "" = TruncationNotice
	MinKeep int    // smallest prefix kept; 0 = MinKeepChars
}

func (o TruncateOptions) withDefaults() TruncateOptions {
	if o.Notice == "" {
		o.Notice = TruncationNotice
	}
	if o.MinKeep <= 0 {
		o.MinKeep = MinKeepChars
	}
	return o
}

// TextCut describes what a truncation did to one text. Lengths are UTF-16 units.
type TextCut struct {
	Truncated bool `json:"truncated"`
	// KeptPrefix is how much of the input opens the output (the whole
	// input when not truncated).
	KeptPrefix int `json:"keptPrefixLength"`
	// CutAtNewline reports that the cut was moved back to a newline (which
	// is not kept).
	CutAtNewline bool `json:"-"`
	// Output is the length of the result.
	Output int `json:"outputLength"`
}

// TruncateText cuts text to about maxChars UTF-16 units: unchanged when it
// fits; else it keeps max(MinKeep, maxChars − len(notice)) units, moved back
// to the last newline at or before that point when the newline lies beyond
// 80 % of it, and appends the notice. The result can exceed maxChars when
// MinKeep applies.
func TruncateText(text string, maxChars int, opts TruncateOptions) (string, TextCut) {
	n := ecmatext.Len(text)
	if n <= maxChars {
		return text, TextCut{KeptPrefix: n, Output: n}
	}
	opts = opts.withDefaults()
	notice := ecmatext.Len(opts.Notice)
	keep := max(opts.MinKeep, maxChars-notice)
	cut := keep
	atNewline := false
	if nl := ecmatext.LastIndexByte(text, '\n', keep); nl >= 0 && float64(nl) > 0.8*float64(keep) {
		cut, atNewline = nl, true
	}
	p := ecmatext.Prefix(text, cut)
	kept := ecmatext.Len(p)
	return p + opts.Notice, TextCut{Truncated: true, KeptPrefix: kept, CutAtNewline: atNewline, Output: kept + notice}
}

// TextLen returns the total UTF-16 length of the text blocks of c (images
// and other blocks count zero).
func TextLen(c message.Content) int {
	n := 0
	for _, b := range c.Blocks {
		if b.Type == message.BlockText {
			n += ecmatext.Len(b.Text)
		}
	}
	return n
}

// TruncateContent shares maxChars between the text blocks of c in proportion
// to their lengths (each block at least MinKeep + len(notice)) and truncates
// each independently, so the total can exceed maxChars. Content whose total
// text fits is returned as is. cuts has one entry per block of c; non-text
// blocks get the zero TextCut.
func TruncateContent(c message.Content, maxChars int, opts TruncateOptions) (out message.Content, cuts []TextCut, changed bool) {
	opts = opts.withDefaults()
	cuts = make([]TextCut, len(c.Blocks))
	lens := make([]int, len(c.Blocks))
	total := 0
	for i, b := range c.Blocks {
		if b.Type == message.BlockText {
			lens[i] = ecmatext.Len(b.Text)
			total += lens[i]
			cuts[i] = TextCut{KeptPrefix: lens[i], Output: lens[i]}
		}
	}
	if total <= maxChars {
		return c, cuts, false
	}
	floor := opts.MinKeep + ecmatext.Len(opts.Notice)
	out = c.Clone()
	for i, b := range out.Blocks {
		if b.Type != message.BlockText {
			continue
		}
		budget := max(floor, int(math.Floor(float64(maxChars)*float64(lens[i])/float64(total))))
		t, cut := TruncateText(b.Text, budget, opts)
		if cut.Truncated {
			out.Blocks[i].Text = t
			changed = true
		}
		cuts[i] = cut
	}
	if !changed {
		return c, cuts, false
	}
	out.SetPlain(c.IsPlain())
	return out, cuts, true
}

// TruncateToolResult applies TruncateContent to a tool result message (any
// other message is returned unchanged). The input is never modified.
func TruncateToolResult(m message.Message, maxChars int, opts TruncateOptions) (message.Message, []TextCut, bool) {
	if !IsToolResult(m) {
		return m, nil, false
	}
	c, cuts, changed := TruncateContent(toolContent(m), maxChars, opts)
	if !changed {
		return m, cuts, false
	}
	return withToolContent(m, c), cuts, true
}

// CapForPersistence applies the write-time cap to a tool result: at most
// HardMaxToolResultChars of text, cut with PersistenceNotice. Call it on
// every tool result before it is appended to a transcript.
func CapForPersistence(m message.Message) (message.Message, bool) {
	out, _, changed := TruncateToolResult(m, HardMaxToolResultChars, TruncateOptions{Notice: PersistenceNotice})
	return out, changed
}

// MessagesCut is the outcome of TruncateToolResults.
type MessagesCut struct {
	// Truncated is how many tool results were cut.
	Truncated int
	// PerMessage has one entry per input message: nil for messages that are
	// not tool results, else the cuts of its blocks.
	PerMessage [][]TextCut
}

// TruncateToolResults is the in-memory overflow-recovery pass: every tool
// result whose text exceeds MaxToolResultChars(contextTokens) is truncated
// with TruncationNotice. The input slice is not modified; when nothing is cut
// the returned slice is the input.
func TruncateToolResults(msgs []message.Message, contextTokens int) ([]message.Message, MessagesCut) {
	limit := MaxToolResultChars(contextTokens)
	res := MessagesCut{PerMessage: make([][]TextCut, len(msgs))}
	out := msgs
	for i, m := range msgs {
		if !IsToolResult(m) {
			continue
		}
		nm, cuts, changed := TruncateToolResult(m, limit, TruncateOptions{})
		res.PerMessage[i] = cuts
		if !changed {
			continue
		}
		if res.Truncated == 0 {
			out = append([]message.Message(nil), msgs...)
		}
		out[i] = nm
		res.Truncated++
	}
	return out, res
}

// HasOversizedToolResult reports whether any tool result's text exceeds
// MaxToolResultChars(contextTokens): the run loop's test for whether
// overflow recovery by truncation is worth trying.
func HasOversizedToolResult(msgs []message.Message, contextTokens int) bool {
	limit := MaxToolResultChars(contextTokens)
	for _, m := range msgs {
		if IsToolResult(m) && TextLen(toolContent(m)) > limit {
			return true
		}
	}
	return false
}
