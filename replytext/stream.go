package replytext

import (
	"regexp"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// Text event types of an assistant message stream.
const (
	EventTextStart = "text_start"
	EventTextDelta = "text_delta"
	EventTextEnd   = "text_end"
)

// Accumulator collects the raw text of one assistant message from its text
// events. Reset it at message_start (not at text_end, which can arrive late
// or repeat).
type Accumulator struct {
	buf strings.Builder
}

// Add takes one text event and returns the new text it contributes (possibly
// empty): the delta of text_delta; for text_start and text_end the delta if
// present, else the part of content beyond what was already accumulated
// (nothing when content is already accounted for, all of it when it is
// unrelated). Other event types contribute nothing.
func (a *Accumulator) Add(eventType, delta, content string) string {
	var chunk string
	switch eventType {
	case EventTextDelta:
		chunk = delta
	case EventTextStart, EventTextEnd:
		if delta != "" {
			chunk = delta
			break
		}
		if content == "" {
			break
		}
		have := a.buf.String()
		switch {
		case strings.HasPrefix(content, have):
			chunk = content[len(have):]
		case strings.HasPrefix(have, content):
		case !strings.Contains(have, content):
			chunk = content
		}
	}
	a.buf.WriteString(chunk)
	return chunk
}

// Text returns the accumulated raw text.
func (a *Accumulator) Text() string { return a.buf.String() }

// Reset clears the accumulated text.
func (a *Accumulator) Reset() { a.buf.Reset() }

// Update is one assistant text update to publish.
type Update struct {
	// Text is the cleaned full text so far.
	Text string
	// Delta is what Text added since the previous update.
	Delta string
}

// Stream turns the text events of one assistant message into assistant
// updates: the visible text is the accumulated raw text with reasoning and
// <final> tags stripped (read incrementally, see Stripper) and trimmed, and
// an update is published whenever it grows.
type Stream struct {
	// EnforceFinal keeps only text inside <final> (see Stripper).
	EnforceFinal bool

	acc       Accumulator
	strip     Stripper
	visible   strings.Builder
	published string
}

// Reset starts a new assistant message.
func (s *Stream) Reset() {
	s.acc.Reset()
	s.strip = Stripper{EnforceFinal: s.EnforceFinal}
	s.visible.Reset()
	s.published = ""
}

// Add feeds one text event. It returns the raw chunk the event contributed
// (for a block chunker), the text of the chunk that became visible, and the
// update to publish if the visible text grew.
func (s *Stream) Add(eventType, delta, content string) (chunk, visibleDelta string, up Update, ok bool) {
	s.strip.EnforceFinal = s.EnforceFinal
	chunk = s.acc.Add(eventType, delta, content)
	if chunk != "" {
		visibleDelta = s.strip.Write(chunk)
		s.visible.WriteString(visibleDelta)
	}
	next := ecmatext.Trim(s.visible.String())
	if len(next) <= len(s.published) || !strings.HasPrefix(next, s.published) {
		return chunk, visibleDelta, Update{}, false
	}
	d := next[len(s.published):]
	s.published = next
	return chunk, visibleDelta, Update{Text: next, Delta: d}, true
}

// Raw returns the accumulated raw text of the message.
func (s *Stream) Raw() string { return s.acc.Text() }

// Published returns the last published visible text.
func (s *Stream) Published() string { return s.published }

// SilentToken is the reply a model gives to say nothing.
const SilentToken = "NO_REPLY"

// IsSilent reports whether text is exactly the silent token, optionally
// surrounded by whitespace. Text that merely ends with it is a real reply.
func IsSilent(text string) bool { return ecmatext.Trim(text) == SilentToken }

// BlockFilter cleans block replies before they are sent: it strips
// reasoning and <final> tags statefully across blocks, removes downgraded
// tool-call text, trims the end, and skips a block that is empty, repeats
// the previous block, duplicates a text already sent through a messaging
// tool, or repeats the message's last assistant text. Reset it at each
// assistant message start.
type BlockFilter struct {
	// EnforceFinal keeps only text inside <final> (see Stripper).
	EnforceFinal bool
	// MessagingSent holds the normalised texts (NormalizeForComparison)
	// committed by messaging tools during the run.
	MessagingSent []string

	tags     Stripper
	last     string
	lastText string
	lastNorm string
	haveLast bool
}

// Reset starts a new assistant message (MessagingSent is kept).
func (f *BlockFilter) Reset() {
	f.tags = Stripper{}
	f.last, f.lastText, f.lastNorm, f.haveLast = "", "", "", false
}

// Filter returns the block to send for a chunk from the block chunker, and
// false when the chunk must be skipped.
func (f *BlockFilter) Filter(chunk string) (string, bool) {
	f.tags.EnforceFinal = f.EnforceFinal
	out := ecmatext.TrimEnd(StripDowngradedToolCallText(f.tags.Strip(chunk)))
	if out == "" || out == f.last {
		return "", false
	}
	norm := NormalizeForComparison(out)
	if IsMessagingDuplicate(norm, f.MessagingSent) {
		return "", false
	}
	if f.haveLast && (out == f.lastText || (norm != "" && norm == f.lastNorm)) {
		return "", false
	}
	f.last = out
	f.lastText, f.lastNorm, f.haveLast = out, norm, true
	return out, true
}

var (
	toolResultRe   = regexp.MustCompile(`(?i)\[Tool Result for ID[^\]]*\]\n?`)
	historicalRe   = regexp.MustCompile(`(?i)\[Historical context:[^\]]*\]\n?`)
	toolCallRe     = regexp.MustCompile(`(?i)\[Tool Call:[^\]]*\]`)
	downgradedHint = regexp.MustCompile(`(?i)\[(?:Tool (?:Call|Result)|Historical context)`)
	nextToolRe     = regexp.MustCompile(`\n*\[Tool `)
)

// StripDowngradedToolCallText removes tool calls and results that a model
// wrote out as text after a provider switch: "[Tool Call: name (ID: …)]"
// with an optional "Arguments: {…}" part, "[Tool Result for ID …]" with its
// content up to the next "[Tool " marker or the end, and "[Historical
// context: …]" markers.
func StripDowngradedToolCallText(text string) string {
	if text == "" || !downgradedHint.MatchString(text) {
		return text
	}
	text = stripToolCalls(text)
	text = stripToolResults(text)
	return historicalRe.ReplaceAllString(text, "")
}

func stripToolCalls(text string) string {
	var b strings.Builder
	cursor := 0
	for _, m := range toolCallRe.FindAllStringIndex(text, -1) {
		if m[0] < cursor {
			continue
		}
		b.WriteString(text[cursor:m[0]])
		i := skipHorizontal(text, m[1])
		if i < len(text) && text[i] == '\n' {
			i = skipHorizontal(text, i+1)
		} else if strings.HasPrefix(text[i:], "\r\n") {
			i = skipHorizontal(text, i+2)
		}
		if len(text)-i >= 9 && strings.EqualFold(text[i:i+9], "arguments") {
			j := i + 9
			if j < len(text) && text[j] == ':' {
				j++
			}
			j = skipHorizontal(text, j)
			if end, ok := consumeJSONish(text, j); ok {
				i = end
			} else {
				i = j
			}
		}
		if i < len(text) && text[i] == '\n' {
			i++
		}
		cursor = i
	}
	b.WriteString(text[cursor:])
	return b.String()
}

func skipHorizontal(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// consumeJSONish skips a balanced {…} or […] value (strings respected), or
// else the rest of the line.
func consumeJSONish(s string, i int) (int, bool) {
	if i >= len(s) {
		return i, false
	}
	if s[i] != '{' && s[i] != '[' {
		nl := strings.IndexByte(s[i:], '\n')
		if nl < 0 {
			return len(s), true
		}
		return i + nl, true
	}
	depth, inStr, esc := 0, false, false
	for j := i; j < len(s); j++ {
		c := s[j]
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return j + 1, true
			}
		}
	}
	return len(s), true
}

func stripToolResults(text string) string {
	var b strings.Builder
	cursor := 0
	for {
		loc := toolResultRe.FindStringIndex(text[cursor:])
		if loc == nil {
			break
		}
		start, end := cursor+loc[0], cursor+loc[1]
		b.WriteString(text[cursor:start])
		// The content runs lazily up to the next "[Tool " marker (its
		// leading newlines kept) or to the end.
		if nx := nextToolRe.FindStringIndex(text[end:]); nx != nil {
			cursor = end + nx[0]
		} else {
			cursor = len(text)
			for cursor > end && text[cursor-1] == '\n' {
				cursor--
			}
		}
	}
	b.WriteString(text[cursor:])
	return b.String()
}
