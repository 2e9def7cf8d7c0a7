package replytext

import (
	"sort"
	"strings"
)

// span is a half-open byte range [start, end).
type span struct{ start, end int }

// InlineCode is the inline-code state carried from one chunk to the next:
// whether a backtick span is open, and how many backticks opened it.
type InlineCode struct {
	Open  bool
	Ticks int
}

// codeIndex tells whether a byte offset of a text lies inside code: a fenced
// block of the text itself, or an inline backtick span (which may have been
// opened by an earlier chunk).
type codeIndex struct {
	fences []span
	inline []span
	state  InlineCode // inline state at the end of the text
}

func (c *codeIndex) inside(i int) bool { return inSpans(c.fences, i) || inSpans(c.inline, i) }

// inSpans reports whether i lies in one of spans, which are sorted and do
// not overlap.
func inSpans(spans []span, i int) bool {
	k := sort.Search(len(spans), func(k int) bool { return spans[k].end > i })
	return k < len(spans) && spans[k].start <= i
}

func buildCodeIndex(text string, st InlineCode) codeIndex {
	idx := codeIndex{fences: parseFences(text)}
	open, ticks := st.Open, st.Ticks
	openStart := -1
	if open {
		openStart = 0
	}
	fi := 0 // the first fence that may contain i (i only grows)
	for i := 0; i < len(text); {
		for fi < len(idx.fences) && idx.fences[fi].end <= i {
			fi++
		}
		if fi < len(idx.fences) && idx.fences[fi].start <= i {
			i = idx.fences[fi].end
			continue
		}
		if text[i] != '`' {
			i++
			continue
		}
		run := i
		for i < len(text) && text[i] == '`' {
			i++
		}
		n := i - run
		if !open {
			open, ticks, openStart = true, n, run
			continue
		}
		if n == ticks {
			idx.inline = append(idx.inline, span{openStart, i})
			open, ticks, openStart = false, 0, -1
		}
	}
	if open {
		idx.inline = append(idx.inline, span{openStart, len(text)})
	}
	idx.state = InlineCode{Open: open, Ticks: ticks}
	return idx
}

// parseFences finds fenced code blocks: a line of up to three spaces and
// three or more backticks or tildes opens one, a later line starting with
// the same character at least as many times closes it, an unclosed fence
// runs to the end.
func parseFences(s string) []span {
	var spans []span
	open := false
	var start, openLen int
	var openChar byte
	offset := 0
	for {
		nl := strings.IndexByte(s[offset:], '\n')
		lineEnd := len(s)
		if nl >= 0 {
			lineEnd = offset + nl
		}
		if c, n, ok := fenceMarker(s[offset:lineEnd]); ok {
			if !open {
				open, start, openChar, openLen = true, offset, c, n
			} else if c == openChar && n >= openLen {
				spans = append(spans, span{start, lineEnd})
				open = false
			}
		}
		if nl < 0 {
			break
		}
		offset = lineEnd + 1
	}
	if open {
		spans = append(spans, span{start, len(s)})
	}
	return spans
}

// fenceMarker matches /^( {0,3})(`{3,}|~{3,})(.*)$/ with JavaScript's "."
// (no line terminators after the marker).
func fenceMarker(line string) (byte, int, bool) {
	i := 0
	for i < len(line) && i < 4 && line[i] == ' ' {
		i++
	}
	if i > 3 || i >= len(line) || (line[i] != '`' && line[i] != '~') {
		return 0, 0, false
	}
	c := line[i]
	j := i
	for j < len(line) && line[j] == c {
		j++
	}
	if j-i < 3 {
		return 0, 0, false
	}
	rest := line[j:]
	if strings.ContainsAny(rest, "\r\u2028\u2029") {
		return 0, 0, false
	}
	return c, j - i, true
}
