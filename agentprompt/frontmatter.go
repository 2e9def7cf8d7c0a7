package agentprompt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The frontmatter of a SKILL.md is a YAML mapping between two "---" lines.
// pi parses it with a full YAML library; this package reads the subset that
// skills use, without a YAML dependency:
//
//   - top-level "key: value" lines, in any order, keys unique;
//   - plain values (an unquoted " #" starts a comment; more-indented lines
//     that follow are folded into the value with spaces);
//   - 'single-quoted' and "double-quoted" values (YAML escapes), which may
//     span lines;
//   - block scalars "|" and ">" with the chomping indicators "-" and "+" and
//     an optional indentation digit;
//   - an empty value followed by indented lines (a nested mapping or a
//     list, such as metadata): the value is the block's raw text, dedented;
//   - flow values ({...}, [...], such as metadata written as JSON on one
//     line) are kept as raw text;
//   - "null" and "~" read as the empty string.
//
// Anchors, aliases, tags, multiple documents and complex keys are not
// supported: they are read as plain text or rejected with an error, never a
// panic.

// errNoFrontmatter reports a file that does not start with a "---" line.
var errNoFrontmatter = errors.New("no frontmatter (the file must start with a --- line)")

// parseFrontmatter returns the fields of the frontmatter at the start of src.
// A UTF-8 byte order mark and CRLF line ends are accepted.
func parseFrontmatter(src string) (map[string]string, error) {
	src = strings.TrimPrefix(src, "\uFEFF")
	src = strings.ReplaceAll(src, "\r\n", "\n")
	first, rest, _ := strings.Cut(src, "\n")
	if strings.TrimRight(first, " \t") != "---" {
		return nil, errNoFrontmatter
	}
	var lines []string
	closed := false
	for rest != "" {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		if strings.TrimRight(line, " \t") == "---" {
			closed = true
			break
		}
		lines = append(lines, line)
	}
	if !closed {
		return nil, errors.New("frontmatter is not closed by a --- line")
	}
	return parseFields(lines)
}

// parseFields parses the lines between the two "---" lines. Line numbers in
// errors count from the file's first line (the opening "---").
func parseFields(lines []string) (map[string]string, error) {
	fields := make(map[string]string)
	for i := 0; i < len(lines); {
		line := lines[i]
		lineNo := i + 2
		if isBlank(line) || isCommentLine(line) {
			i++
			continue
		}
		if indented(line) {
			return nil, fmt.Errorf("line %d: unexpected indentation", lineNo)
		}
		key, val, err := splitKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if _, dup := fields[key]; dup {
			return nil, fmt.Errorf("line %d: duplicate key %q", lineNo, key)
		}
		// The value's block: every following line that is blank or indented.
		i++
		j := i
		for j < len(lines) && (isBlank(lines[j]) || indented(lines[j])) {
			j++
		}
		v, err := scalar(val, lines[i:j])
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", lineNo, key, err)
		}
		fields[key] = v
		i = j
	}
	return fields, nil
}

// splitKey splits a top-level "key: value" line.
func splitKey(line string) (key, val string, err error) {
	if line == "-" || strings.HasPrefix(line, "- ") {
		return "", "", errors.New("expected a key: value mapping, not a list")
	}
	if line[0] == '"' || line[0] == '\'' {
		// A quoted key.
		end := strings.IndexByte(line[1:], line[0])
		if end < 0 {
			return "", "", errors.New("unterminated quoted key")
		}
		key, rest := line[1:1+end], line[2+end:]
		if key == "" {
			return "", "", errors.New("empty key")
		}
		if !strings.HasPrefix(rest, ":") || (len(rest) > 1 && rest[1] != ' ' && rest[1] != '\t') {
			return "", "", errors.New(`expected ":" after the key`)
		}
		return key, rest[1:], nil
	}
	for i := 0; i < len(line); i++ {
		if line[i] != ':' {
			continue
		}
		if i+1 < len(line) && line[i+1] != ' ' && line[i+1] != '\t' {
			continue // "a:b" is part of a plain key or value
		}
		key = strings.TrimRight(line[:i], " \t")
		if key == "" {
			return "", "", errors.New("empty key")
		}
		return key, line[i+1:], nil
	}
	return "", "", errors.New(`expected "key: value"`)
}

// scalar reads the value that starts after a key's colon, with the key's
// block (the indented or blank lines after the key line).
func scalar(val string, block []string) (string, error) {
	val = strings.TrimLeft(val, " \t")
	switch {
	case val == "" || val[0] == '#':
		return nested(block), nil
	case val[0] == '"' || val[0] == '\'':
		text := val[1:]
		if len(block) > 0 {
			text += "\n" + strings.Join(block, "\n")
		}
		var (
			v, rest string
			err     error
		)
		if val[0] == '"' {
			v, rest, err = doubleQuoted(text)
		} else {
			v, rest, err = singleQuoted(text)
		}
		if err != nil {
			return "", err
		}
		for l := range strings.SplitSeq(rest, "\n") {
			if t := strings.TrimSpace(l); t != "" && t[0] != '#' {
				return "", fmt.Errorf("unexpected text %q after the quoted value", truncateForError(t))
			}
		}
		return v, nil
	case val[0] == '|' || val[0] == '>':
		return blockScalar(val, block)
	case val[0] == '{' || val[0] == '[':
		// Flow collections are kept as raw text: the only one skills use is
		// metadata, which is JSON on one line.
		parts := []string{strings.TrimSpace(val)}
		for _, l := range block {
			if t := strings.TrimSpace(l); t != "" {
				parts = append(parts, t)
			}
		}
		return strings.Join(parts, " "), nil
	default:
		return plain(val, block), nil
	}
}

// plain reads a plain (unquoted) scalar: comments end it, continuation lines
// are folded with spaces (an empty line is a line break).
func plain(first string, block []string) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(stripComment(first)))
	empty := 0
	for _, l := range block {
		t := strings.TrimSpace(l)
		if t == "" {
			empty++
			continue
		}
		if t[0] == '#' {
			break // a comment line ends a plain scalar
		}
		if empty > 0 {
			b.WriteString(strings.Repeat("\n", empty))
		} else {
			b.WriteByte(' ')
		}
		empty = 0
		b.WriteString(strings.TrimSpace(stripComment(t)))
	}
	s := b.String()
	switch s {
	case "~", "null", "Null", "NULL":
		return ""
	}
	return s
}

// stripComment removes a " #" comment from a plain value.
func stripComment(s string) string {
	for i := 1; i < len(s); i++ {
		if s[i] == '#' && (s[i-1] == ' ' || s[i-1] == '\t') {
			return s[:i]
		}
	}
	return s
}

// nested returns the raw text of a nested block (a mapping or list under a
// key with no value), dedented by the indentation of its first line, without
// leading and trailing blank lines.
func nested(block []string) string {
	start, end := 0, len(block)
	for start < end && isBlank(block[start]) {
		start++
	}
	for end > start && isBlank(block[end-1]) {
		end--
	}
	if start == end {
		return ""
	}
	ind := indentOf(block[start])
	out := make([]string, 0, end-start)
	for _, l := range block[start:end] {
		out = append(out, dedent(l, ind))
	}
	return strings.Join(out, "\n")
}

// blockScalar reads a literal (|) or folded (>) block scalar.
func blockScalar(header string, block []string) (string, error) {
	literal := header[0] == '|'
	chomp := byte(0) // 0 clip, '-' strip, '+' keep
	ind := 0
	h := header[1:]
	for range 2 { // at most one of each indicator, in either order
		if h == "" {
			break
		}
		if c := h[0]; (c == '-' || c == '+') && chomp == 0 {
			chomp = c
		} else if c >= '1' && c <= '9' && ind == 0 {
			ind = int(c - '0')
		} else {
			break
		}
		h = h[1:]
	}
	if h = strings.TrimLeft(h, " \t"); h != "" && h[0] != '#' {
		return "", fmt.Errorf("unexpected text %q after the block scalar indicator", truncateForError(h))
	}
	if ind == 0 {
		for _, l := range block {
			if !isBlank(l) {
				ind = indentOf(l)
				break
			}
		}
	}
	lines := make([]string, len(block))
	for i, l := range block {
		if isBlank(l) && indentOf(l) <= ind {
			lines[i] = ""
			continue
		}
		lines[i] = dedent(l, ind)
	}
	// Trailing empty lines only matter for keep chomping.
	trailing := 0
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
		trailing++
	}
	var body string
	if literal {
		body = strings.Join(lines, "\n")
	} else {
		body = fold(lines)
	}
	if len(lines) == 0 {
		if chomp == '+' {
			return strings.Repeat("\n", trailing), nil
		}
		return "", nil
	}
	switch chomp {
	case '-':
		return body, nil
	case '+':
		return body + strings.Repeat("\n", trailing+1), nil
	}
	return body + "\n", nil
}

// fold joins the lines of a folded block scalar: a line break between two
// normal lines becomes a space, an empty line becomes a line break, and
// more-indented lines keep their line breaks.
func fold(lines []string) string {
	var b strings.Builder
	started, prevNormal := false, false
	empty := 0
	for _, l := range lines {
		if l == "" {
			empty++
			continue
		}
		normal := l[0] != ' ' && l[0] != '\t'
		switch {
		case !started:
			b.WriteString(strings.Repeat("\n", empty))
		case empty > 0 && prevNormal && normal:
			b.WriteString(strings.Repeat("\n", empty))
		case empty > 0:
			b.WriteString(strings.Repeat("\n", empty+1))
		case prevNormal && normal:
			b.WriteByte(' ')
		default:
			b.WriteByte('\n')
		}
		b.WriteString(l)
		started, prevNormal, empty = true, normal, 0
	}
	return b.String()
}

// doubleQuoted reads a double-quoted scalar from s, which starts just after
// the opening quote. It returns the value and the text after the closing
// quote.
func doubleQuoted(s string) (val, rest string, err error) {
	var b []byte
	for i := 0; i < len(s); {
		c := s[i]
		switch c {
		case '"':
			return string(b), s[i+1:], nil
		case '\n':
			b = foldBreak(b, s, &i)
		case '\\':
			if i+1 >= len(s) {
				return "", "", errors.New("unterminated double-quoted value")
			}
			e := s[i+1]
			i += 2
			switch e {
			case '\n': // an escaped line break joins the lines
				for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
					i++
				}
			case '0':
				b = append(b, 0)
			case 'a':
				b = append(b, '\a')
			case 'b':
				b = append(b, '\b')
			case 't', '\t':
				b = append(b, '\t')
			case 'n':
				b = append(b, '\n')
			case 'v':
				b = append(b, '\v')
			case 'f':
				b = append(b, '\f')
			case 'r':
				b = append(b, '\r')
			case 'e':
				b = append(b, 0x1b)
			case ' ', '"', '/', '\\':
				b = append(b, e)
			case 'N':
				b = utf8.AppendRune(b, 0x85)
			case '_':
				b = utf8.AppendRune(b, 0xA0)
			case 'L':
				b = utf8.AppendRune(b, 0x2028)
			case 'P':
				b = utf8.AppendRune(b, 0x2029)
			case 'x', 'u', 'U':
				n := 2
				if e == 'u' {
					n = 4
				} else if e == 'U' {
					n = 8
				}
				if i+n > len(s) {
					return "", "", fmt.Errorf(`short \%c escape`, e)
				}
				r, perr := strconv.ParseUint(s[i:i+n], 16, 32)
				if perr != nil {
					return "", "", fmt.Errorf(`bad \%c escape %q`, e, s[i:i+n])
				}
				b = utf8.AppendRune(b, rune(r)) // invalid code points become U+FFFD
				i += n
			default:
				return "", "", fmt.Errorf(`unknown escape \%c`, e)
			}
		default:
			b = append(b, c)
			i++
		}
	}
	return "", "", errors.New("unterminated double-quoted value")
}

// singleQuoted reads a single-quoted scalar from s, which starts just after
// the opening quote; a doubled quote stands for one quote.
func singleQuoted(s string) (val, rest string, err error) {
	var b []byte
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case '\'':
			if i+1 < len(s) && s[i+1] == '\'' {
				b = append(b, '\'')
				i += 2
				continue
			}
			return string(b), s[i+1:], nil
		case '\n':
			b = foldBreak(b, s, &i)
		default:
			b = append(b, c)
			i++
		}
	}
	return "", "", errors.New("unterminated single-quoted value")
}

// foldBreak folds the line break at s[*i] inside a quoted scalar: trailing
// white space before it and leading white space after it are dropped, and
// the break becomes a space, or n line breaks when n empty lines follow.
func foldBreak(b []byte, s string, i *int) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	j := *i + 1
	empty := 0
	for {
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j < len(s) && s[j] == '\n' {
			empty++
			j++
			continue
		}
		break
	}
	*i = j
	if empty == 0 {
		return append(b, ' ')
	}
	for range empty {
		b = append(b, '\n')
	}
	return b
}

func isBlank(l string) bool { return strings.TrimLeft(l, " \t") == "" }

func isCommentLine(l string) bool { return strings.HasPrefix(strings.TrimLeft(l, " \t"), "#") }

func indented(l string) bool { return l != "" && (l[0] == ' ' || l[0] == '\t') }

func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " \t")) }

// dedent removes up to n leading spaces or tabs.
func dedent(l string, n int) string {
	i := 0
	for i < n && i < len(l) && (l[i] == ' ' || l[i] == '\t') {
		i++
	}
	return l[i:]
}

// truncateForError shortens text quoted in an error message.
func truncateForError(s string) string {
	const maxLen = 40
	if len(s) <= maxLen {
		return s
	}
	i := maxLen
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
