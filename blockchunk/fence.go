package blockchunk

import "strings"

// fence is one fenced code block of a buffer, in byte offsets: start is the
// first byte of the opening line, end the end of the closing line (or of the
// buffer when the fence is still open).
type fence struct {
	start, end int
	openLine   string // the opening line, without its newline
	marker     string // the run of ` or ~ that opened it
	indent     string // up to three spaces before the marker
}

// parseFences finds the fenced code blocks of s. A line of up to three spaces,
// then three or more backticks or tildes, opens a fence; a later line whose
// marker has the same character and at least the same length closes it
// (whatever follows the marker, as in the reference); an unclosed fence runs
// to the end of s.
func parseFences(s string, dst []fence) []fence {
	spans := dst[:0]
	var open *fence
	var openChar byte
	var openLen int
	var cur fence
	offset := 0
	for {
		nl := strings.IndexByte(s[offset:], '\n')
		lineEnd := len(s)
		if nl >= 0 {
			lineEnd = offset + nl
		}
		line := s[offset:lineEnd]
		if indent, marker, ok := matchFenceLine(line); ok {
			if open == nil {
				cur = fence{start: offset, openLine: line, marker: marker, indent: indent}
				open = &cur
				openChar, openLen = marker[0], len(marker)
			} else if marker[0] == openChar && len(marker) >= openLen {
				cur.end = lineEnd
				spans = append(spans, cur)
				open = nil
			}
		}
		if nl < 0 {
			break
		}
		offset = lineEnd + 1
	}
	if open != nil {
		cur.end = len(s)
		spans = append(spans, cur)
	}
	return spans
}

// matchFenceLine matches /^( {0,3})(`{3,}|~{3,})(.*)$/ as JavaScript does:
// "." does not match line terminators, so a line holding "\r", U+2028 or
// U+2029 after the marker is not a fence line.
func matchFenceLine(line string) (indent, marker string, ok bool) {
	i := 0
	for i < len(line) && i < 4 && line[i] == ' ' {
		i++
	}
	if i > 3 || i >= len(line) {
		return "", "", false
	}
	c := line[i]
	if c != '`' && c != '~' {
		return "", "", false
	}
	j := i
	for j < len(line) && line[j] == c {
		j++
	}
	if j-i < 3 {
		return "", "", false
	}
	rest := line[j:]
	if strings.IndexByte(rest, '\r') >= 0 || strings.Contains(rest, "\u2028") || strings.Contains(rest, "\u2029") {
		return "", "", false
	}
	return line[:i], line[i:j], true
}

// fenceAt returns the fence that strictly contains index (start < index <
// end), if any. Breaking there would split the fence.
func fenceAt(spans []fence, index int) *fence {
	lo, hi := 0, len(spans)-1
	for lo <= hi {
		mid := (lo + hi) / 2
		sp := &spans[mid]
		switch {
		case index <= sp.start:
			hi = mid - 1
		case index >= sp.end:
			lo = mid + 1
		default:
			return sp
		}
	}
	return nil
}

// safeBreak reports whether index is not strictly inside a fence.
func safeBreak(spans []fence, index int) bool { return fenceAt(spans, index) == nil }
