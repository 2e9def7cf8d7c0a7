package replytext

import (
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// thinkingNames are the reasoning tags whose content is hidden.
var thinkingNames = map[string]bool{"think": true, "thinking": true, "thought": true, "antthinking": true}

// tagKind classifies a match of /<\s*(\/?)\s*NAME\s*>/i.
type tagKind int

const (
	tagNone     tagKind = iota // not a tag of ours (the "<" is text)
	tagMore                    // could still become one: more input needed
	tagThinking                // <think>, <thinking>, <thought>, <antthinking>
	tagFinal                   // <final>
)

// matchTag matches a tag at s[i] (s[i] == '<'). At the end of the input it
// reports tagMore unless atEnd, when the input is complete.
func matchTag(s string, i int, atEnd bool) (kind tagKind, end int, closing bool) {
	more := func() (tagKind, int, bool) {
		if atEnd {
			return tagNone, 0, false
		}
		return tagMore, 0, false
	}
	j := skipJSSpace(s, i+1)
	if j >= len(s) {
		return more()
	}
	if s[j] == '/' {
		closing = true
		if j = skipJSSpace(s, j+1); j >= len(s) {
			return more()
		}
	}
	k := j
	for k < len(s) && k-j <= 11 && isASCIILetter(s[k]) {
		k++
	}
	if k-j > 11 || k == j {
		return tagNone, 0, false
	}
	if k >= len(s) {
		// The name may go on: only a prefix of a known name can still match.
		if isNamePrefix(strings.ToLower(s[j:k])) {
			return more()
		}
		return tagNone, 0, false
	}
	name := strings.ToLower(s[j:k])
	if !thinkingNames[name] && name != "final" {
		return tagNone, 0, false
	}
	k = skipJSSpace(s, k)
	if k >= len(s) {
		return more()
	}
	if s[k] != '>' {
		return tagNone, 0, false
	}
	if name == "final" {
		return tagFinal, k + 1, closing
	}
	return tagThinking, k + 1, closing
}

func isNamePrefix(p string) bool {
	for _, n := range [...]string{"thinking", "thought", "antthinking", "final"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// skipJSSpace skips JavaScript whitespace (\s).
func skipJSSpace(s string, i int) int {
	for i < len(s) {
		c := s[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
			i++
			continue
		}
		if c < 0x80 {
			return i
		}
		r, size := decodeRune(s[i:])
		if !ecmatext.IsSpace(r) {
			return i
		}
		i += size
	}
	return i
}

// Stripper removes reasoning blocks (<think>, <thinking>, <thought>,
// <antthinking>) and <final> tags from streamed text. It reads the text in a
// single pass, keeping its state between chunks: inside a reasoning block,
// inside <final>, inside a fenced code block, inside an inline code span.
// Tags inside code are text. A construct cut by a chunk boundary (a partial
// tag, a backtick run, the start of a possible fence line) is held back
// until the next chunk decides it, so the visible text is the same however
// the text is chunked and never has to be taken back.
//
// The zero value strips in the default mode; set EnforceFinal before the
// first chunk to keep only text inside <final>…</final> (nothing before the
// first <final>).
//
// Differences from the reference, which strips each chunk on its own with
// two regular-expression passes: fenced code is recognised across chunk
// boundaries (the reference sees only fences inside one chunk); code spans
// for <final> tags are judged on the original text, not on the text left
// after removing reasoning; a fence line ending in "\r" is a fence line;
// and a partial tag is held back instead of shown and then removed.
type Stripper struct {
	// EnforceFinal keeps only text inside <final> blocks.
	EnforceFinal bool

	thinking, final bool

	fenceOpen bool
	fenceChar byte
	fenceLen  int

	inlineOpen  bool
	inlineTicks int

	lineChecked bool // the current line's fence check is done
	lineCode    bool // the current line is a fence line or inside a fence

	pending string // input not yet decided
}

// Reset forgets all state (at the start of a new assistant message).
func (s *Stripper) Reset() { *s = Stripper{EnforceFinal: s.EnforceFinal} }

// Thinking reports whether the text read so far ends inside a reasoning
// block.
func (s *Stripper) Thinking() bool { return s.thinking }

// Write reads the next chunk and returns the text that became visible. Up to
// a construct's length of input may be held back until the next Write or
// Flush.
func (s *Stripper) Write(chunk string) string { return s.run(chunk, false) }

// Flush ends the text: held-back input is decided as if nothing followed
// (a partial tag is text) and its visible part returned. The reasoning,
// final and code states carry on.
func (s *Stripper) Flush() string { return s.run("", true) }

// Strip is Write followed by Flush: the visible part of a complete piece
// of text (a block reply), with the state carried to the next piece.
func (s *Stripper) Strip(chunk string) string { return s.run(chunk, true) }

func (s *Stripper) visible() bool { return !s.thinking && (!s.EnforceFinal || s.final) }

func (s *Stripper) run(chunk string, atEnd bool) string {
	p := chunk
	if s.pending != "" {
		p = s.pending + chunk
		s.pending = ""
	}
	var out strings.Builder
	emit := func(t string) {
		if s.visible() {
			out.WriteString(t)
		}
	}
	i := 0
	for i < len(p) {
		if !s.lineChecked {
			if !s.checkLine(p, i, atEnd) {
				goto hold // undecided: hold the line start back
			}
		}
		if s.lineCode {
			// Fence lines are code: copy up to the end of the line.
			nl := strings.IndexByte(p[i:], '\n')
			if nl < 0 {
				emit(p[i:])
				break
			}
			emit(p[i : i+nl+1])
			i += nl + 1
			s.lineChecked = false
			continue
		}
		// Plain text up to the next byte that matters.
		j := i
		for j < len(p) && p[j] != '\n' && p[j] != '`' && p[j] != '<' {
			j++
		}
		emit(p[i:j])
		i = j
		if i >= len(p) {
			break
		}
		switch p[i] {
		case '\n':
			emit("\n")
			i++
			s.lineChecked = false
		case '`':
			m := i
			for m < len(p) && p[m] == '`' {
				m++
			}
			if m == len(p) && !atEnd {
				goto hold
			}
			n := m - i
			switch {
			case !s.inlineOpen:
				s.inlineOpen, s.inlineTicks = true, n
			case n == s.inlineTicks:
				s.inlineOpen, s.inlineTicks = false, 0
			}
			emit(p[i:m])
			i = m
		case '<':
			if s.inlineOpen {
				emit("<")
				i++
				continue
			}
			kind, end, closing := matchTag(p, i, atEnd)
			switch kind {
			case tagMore:
				goto hold
			case tagThinking:
				s.thinking = !closing
				s.afterTag(p[i:end])
				i = end
				continue
			case tagFinal:
				if !s.thinking && s.EnforceFinal {
					switch {
					case !s.final && !closing:
						s.final = true
					case s.final && closing:
						s.final = false
					}
				}
				s.afterTag(p[i:end])
				i = end
				continue
			}
			emit("<")
			i++
		}
	}
	return out.String()
hold:
	s.pending = p[i:]
	return out.String()
}

// afterTag fixes the line state after a tag that spanned a newline: the
// new line started with the tag's tail, so it is no fence line (and no
// fence was open, or the tag would have been code).
func (s *Stripper) afterTag(tag string) {
	if strings.IndexByte(tag, '\n') >= 0 {
		s.lineChecked, s.lineCode = true, false
	}
}

// checkLine decides whether the line starting at p[i] is a fence line: up
// to three spaces, then three or more backticks or tildes. It opens or
// closes the fence and sets lineCode. It reports false when the input ends
// before that is decided and atEnd is false.
func (s *Stripper) checkLine(p string, i int, atEnd bool) bool {
	k := i
	for k < len(p) && p[k] == ' ' && k-i < 4 {
		k++
	}
	marker := 0
	var c byte
	switch {
	case k == len(p) && !atEnd:
		return false
	case k < len(p) && k-i <= 3 && (p[k] == '`' || p[k] == '~'):
		c = p[k]
		m := k
		for m < len(p) && p[m] == c {
			m++
		}
		if m == len(p) && !atEnd {
			return false
		}
		marker = m - k
	}
	s.lineChecked = true
	if marker < 3 {
		s.lineCode = s.fenceOpen
		return true
	}
	s.lineCode = true
	switch {
	case !s.fenceOpen:
		s.fenceOpen, s.fenceChar, s.fenceLen = true, c, marker
	case c == s.fenceChar && marker >= s.fenceLen:
		s.fenceOpen = false
	}
	return true
}

// StripTags strips a complete text with a fresh Stripper. In the default
// mode it repeats until nothing changes, so that a tag assembled from the
// pieces around a removed block (e.g. "<<think>x</think>think>") is removed
// too and the result is stable: StripTags(StripTags(t, false), false) ==
// StripTags(t, false).
func StripTags(text string, enforceFinal bool) string {
	st := Stripper{EnforceFinal: enforceFinal}
	out := st.Strip(text)
	if enforceFinal {
		return out
	}
	for out != text {
		text = out
		st.Reset()
		out = st.Strip(text)
	}
	return out
}
