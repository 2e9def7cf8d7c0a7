package patch

import (
	"fmt"
	"slices"
	"strings"
)

// HunkError is a hunk that does not match the file it updates.
type HunkError struct {
	Hunk     int    // 1-based index of the hunk in its file operation
	Line     int    // the hunk's line in the patch
	Context  string // the @@ context line not found, if that is what failed
	Lines    []string
	FromLine int // 1-based line of the file the search started at
}

func (e *HunkError) Error() string {
	if e.Context != "" {
		return fmt.Sprintf("hunk %d (patch line %d): the @@ context line %q was not found in the file at or after line %d",
			e.Hunk, e.Line, clip(e.Context), e.FromLine)
	}
	shown := e.Lines
	more := ""
	if len(shown) > 8 {
		shown, more = shown[:8], fmt.Sprintf("\n  … (%d more)", len(e.Lines)-8)
	}
	q := make([]string, len(shown))
	for i, l := range shown {
		q[i] = "  " + clip(l)
	}
	return fmt.Sprintf("hunk %d (patch line %d): these lines (context and '-' lines) were not found in the file at or after line %d:\n%s%s",
		e.Hunk, e.Line, e.FromLine, strings.Join(q, "\n"), more)
}

// Apply returns content with the hunks of one update applied, in order,
// each searched for after the previous one. The result ends with a line
// break; a file with CRLF line ends keeps them. A hunk that does not match
// is a *HunkError.
func Apply(content string, chunks []Chunk) (string, error) {
	crlf := strings.Contains(content, "\r\n")
	if crlf {
		content = strings.ReplaceAll(content, "\r\n", "\n")
	}
	lines := strings.Split(content, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	type repl struct {
		at, n int
		with  []string
	}
	var rs []repl
	at := 0
	for k, c := range chunks {
		if c.Context != "" {
			i := seek(lines, []string{c.Context}, at, false)
			if i < 0 {
				return "", &HunkError{Hunk: k + 1, Line: c.Line, Context: c.Context, FromLine: at + 1}
			}
			at = i + 1
		}
		if len(c.Old) == 0 {
			// Only additions: they go at the end of the file.
			rs = append(rs, repl{at: len(lines), with: c.New})
			continue
		}
		old, repl2 := c.Old, c.New
		i := seek(lines, old, at, c.EOF)
		if i < 0 && old[len(old)-1] == "" {
			// A trailing empty line is often the patch's own final newline.
			old = old[:len(old)-1]
			if len(repl2) > 0 && repl2[len(repl2)-1] == "" {
				repl2 = repl2[:len(repl2)-1]
			}
			if len(old) > 0 {
				i = seek(lines, old, at, c.EOF)
			}
		}
		if i < 0 {
			return "", &HunkError{Hunk: k + 1, Line: c.Line, Lines: c.Old, FromLine: at + 1}
		}
		rs = append(rs, repl{at: i, n: len(old), with: repl2})
		at = i + len(old)
	}
	slices.SortStableFunc(rs, func(a, b repl) int { return a.at - b.at })
	out := make([]string, 0, len(lines)+8)
	prev := 0
	for _, r := range rs {
		if r.at < prev { // overlapping hunks cannot happen: each starts after the last
			return "", fmt.Errorf("patch: overlapping hunks at line %d", r.at+1)
		}
		out = append(out, lines[prev:r.at]...)
		out = append(out, r.with...)
		prev = r.at + r.n
	}
	out = append(out, lines[prev:]...)
	nl := "\n"
	if crlf {
		nl = "\r\n"
	}
	return strings.Join(out, nl) + nl, nil
}

// seek finds pattern in lines at or after start (from the last possible
// place first when eof), trying ever looser comparisons; -1 when none
// matches.
func seek(lines, pattern []string, start int, eof bool) int {
	if len(pattern) > len(lines) {
		return -1
	}
	last := len(lines) - len(pattern)
	if eof {
		start = last
	}
	if start > last {
		return -1
	}
	for _, norm := range []func(string) string{
		func(s string) string { return s },
		func(s string) string { return strings.TrimRight(s, " \t\r\f\v") },
		strings.TrimSpace,
		func(s string) string { return typographic.Replace(strings.TrimSpace(s)) },
	} {
	next:
		for i := start; i <= last; i++ {
			for j, p := range pattern {
				if norm(lines[i+j]) != norm(p) {
					continue next
				}
			}
			return i
		}
	}
	return -1
}

// typographic maps the dashes, quotes and spaces models and editors
// substitute for ASCII ones.
var typographic = strings.NewReplacer(
	"\u2010", "-", "\u2011", "-", "\u2012", "-", "\u2013", "-", "\u2014", "-", "\u2015", "-", "\u2212", "-",
	"\u2018", "'", "\u2019", "'", "\u201A", "'", "\u201B", "'",
	"\u201C", "\"", "\u201D", "\"", "\u201E", "\"", "\u201F", "\"",
	"\u00A0", " ", "\u2002", " ", "\u2003", " ", "\u2004", " ", "\u2005", " ", "\u2006", " ",
	"\u2007", " ", "\u2008", " ", "\u2009", " ", "\u200A", " ", "\u202F", " ", "\u205F", " ", "\u3000", " ",
)
