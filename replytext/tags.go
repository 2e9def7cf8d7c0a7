package replytext

import "strings"

// tagMatch is one <think>-family or <final> tag found in a text.
type tagMatch struct {
	start, end int
	close      bool
}

// thinkingNames are the reasoning tags whose content is hidden.
var thinkingNames = map[string]bool{"think": true, "thinking": true, "thought": true, "antthinking": true}

// matchTag matches /<\s*(\/?)\s*NAME\s*>/i at s[i] (s[i] == '<') for the
// names accepted by want, and returns the end of the match.
func matchTag(s string, i int, want func(string) bool) (end int, closing, ok bool) {
	j := skipJSSpace(s, i+1)
	if j < len(s) && s[j] == '/' {
		closing = true
		j = skipJSSpace(s, j+1)
	}
	k := j
	for k < len(s) && isASCIILetter(s[k]) {
		k++
	}
	if k == j || k-j > 11 || !want(strings.ToLower(s[j:k])) {
		return 0, false, false
	}
	k = skipJSSpace(s, k)
	if k >= len(s) || s[k] != '>' {
		return 0, false, false
	}
	return k + 1, closing, true
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

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
		if !isJSSpace(r) {
			return i
		}
		i += size
	}
	return i
}

// findTags returns the non-overlapping matches of a tag family, left to
// right, as a global regular expression would.
func findTags(s string, want func(string) bool) []tagMatch {
	var out []tagMatch
	for i := 0; i < len(s); {
		p := strings.IndexByte(s[i:], '<')
		if p < 0 {
			break
		}
		i += p
		if end, closing, ok := matchTag(s, i, want); ok {
			out = append(out, tagMatch{start: i, end: end, close: closing})
			i = end
			continue
		}
		i++
	}
	return out
}

func isThinkingName(n string) bool { return thinkingNames[n] }
func isFinalName(n string) bool    { return n == "final" }

// Stripper removes reasoning blocks and <final> tags from streamed text,
// carrying its state (inside a reasoning block, inside <final>, inside
// inline code) from one chunk to the next. The zero value strips in the
// default mode; set EnforceFinal before the first chunk to keep only text
// inside <final>…</final>.
type Stripper struct {
	// EnforceFinal keeps only text inside <final> blocks; nothing is kept
	// before the first <final> tag.
	EnforceFinal bool

	thinking bool
	final    bool
	inline   InlineCode
}

// Reset forgets the state (at the start of a new assistant message).
func (s *Stripper) Reset() {
	s.thinking, s.final, s.inline = false, false, InlineCode{}
}

// Thinking reports whether the stream is inside a reasoning block.
func (s *Stripper) Thinking() bool { return s.thinking }

// Strip returns the visible part of the next chunk. Tags inside fenced code
// (of this chunk) or inline code (possibly opened by an earlier chunk) are
// text, not tags.
func (s *Stripper) Strip(chunk string) string {
	if chunk == "" {
		return chunk
	}
	startInline := s.inline
	code := buildCodeIndex(chunk, startInline)

	// 1. Reasoning blocks: drop their content; stray closing tags vanish.
	var b strings.Builder
	last := 0
	in := s.thinking
	for _, m := range findTags(chunk, isThinkingName) {
		if code.inside(m.start) {
			continue
		}
		if !in {
			b.WriteString(chunk[last:m.start])
		}
		in = !m.close
		last = m.end
	}
	if !in {
		b.WriteString(chunk[last:])
	}
	s.thinking = in
	processed := b.String()

	// 2. <final> tags.
	fcode := buildCodeIndex(processed, startInline)
	if !s.EnforceFinal {
		s.inline = fcode.state
		return removeTags(processed, isFinalName, &fcode)
	}
	var r strings.Builder
	inFinal := s.final
	ever := s.final
	lastFinal := 0
	for _, m := range findTags(processed, isFinalName) {
		if fcode.inside(m.start) {
			continue
		}
		switch {
		case !inFinal && !m.close:
			inFinal, ever = true, true
			lastFinal = m.end
		case inFinal && m.close:
			r.WriteString(processed[lastFinal:m.start])
			inFinal = false
			lastFinal = m.end
		}
	}
	if inFinal {
		r.WriteString(processed[lastFinal:])
	}
	s.final = inFinal
	if !ever {
		return ""
	}
	result := r.String()
	rcode := buildCodeIndex(result, startInline)
	s.inline = rcode.state
	return removeTags(result, isFinalName, &rcode)
}

// removeTags deletes the tags of a family that are outside code.
func removeTags(text string, want func(string) bool, code *codeIndex) string {
	ms := findTags(text, want)
	if len(ms) == 0 {
		return text
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		if code.inside(m.start) {
			continue
		}
		b.WriteString(text[last:m.start])
		last = m.end
	}
	b.WriteString(text[last:])
	return b.String()
}

// StripTags strips a complete text with a fresh Stripper (as the reference
// does for a message's final text). In the default mode it repeats until
// nothing changes, so that a tag assembled from the pieces around a removed
// block (e.g. "<<think>x</think>think>") is removed too and the result is
// stable: StripTags(StripTags(t, false), false) == StripTags(t, false). The
// reference strips once and would leave such a tag in place.
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
