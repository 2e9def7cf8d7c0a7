package agentprompt

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

// The frontmatter of a SKILL.md is a YAML mapping between two "---" lines.
// pi reads it with a YAML library; so does this file (go.yaml.in/yaml/v4),
// one top-level entry at a time, so that one bad value does not hide the
// others. An entry starts on a line at column 0 and takes the indented and
// blank lines that follow (and a closing "}" or "]" at column 0, where JSON
// printers leave it); comment lines at column 0 belong to no entry. Keys
// are unique. A value is:
//
//   - a scalar's value (plain, quoted or block, with YAML's escapes and
//     folding); null and an empty value read as "";
//   - for a mapping or a list, its source text: a flow collection ({...},
//     [...]) joined onto one line, a block dedented — metadata written as
//     JSON is read as JSON later (see primaryEnv);
//   - for a value YAML rejects that starts as plain text or a flow
//     collection, the text read as a folded block scalar (lines joined with
//     spaces, " #" comments dropped): YAML forbids ": " in a plain value,
//     which skill descriptions use ("Use when: …"), and metadata may be
//     broken JSON that primaryEnv then reports. Any other value YAML
//     rejects is an error.
//
// Anchors work within one entry; an alias to another entry's anchor is an
// error.

// errNoFrontmatter reports a file that does not start with a "---" line.
var errNoFrontmatter = errors.New("no frontmatter (the file must start with a --- line)")

// parseFrontmatter returns the fields of the frontmatter at the start of src.
// A UTF-8 byte order mark and CRLF line ends are accepted. Line numbers in
// errors count from the file's first line (the opening "---").
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
	entries, err := splitEntries(lines)
	if err != nil {
		return nil, err
	}
	fields := make(map[string]string, len(entries))
	for _, e := range entries {
		key, val, err := e.parse()
		if err != nil {
			return nil, err
		}
		if _, dup := fields[key]; dup {
			return nil, fmt.Errorf("line %d: duplicate key %q", e.line, key)
		}
		fields[key] = val
	}
	return fields, nil
}

// entry is one top-level "key: value" with the lines of its value.
type entry struct {
	line  int      // file line of its first line
	lines []string // the key line, then its value's lines
}

// splitEntries cuts the frontmatter's lines into top-level entries.
func splitEntries(lines []string) ([]entry, error) {
	var entries []entry
	for i, l := range lines {
		switch {
		case l == "" || l[0] == ' ' || l[0] == '\t' || l[0] == '}' || l[0] == ']':
			if len(entries) == 0 {
				if isBlank(l) {
					continue
				}
				return nil, fmt.Errorf("line %d: unexpected indentation", i+2)
			}
			e := &entries[len(entries)-1]
			e.lines = append(e.lines, l)
		case l[0] == '#':
		default:
			entries = append(entries, entry{line: i + 2, lines: []string{l}})
		}
	}
	return entries, nil
}

// parse reads the entry's key and value.
func (e entry) parse() (key, val string, err error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(strings.Join(e.lines, "\n")+"\n"), &doc); err != nil {
		if key, val, ok := e.lenient(); ok {
			return key, val, nil
		}
		return "", "", e.errorf(err)
	}
	if len(doc.Content) != 1 {
		return "", "", fmt.Errorf(`line %d: expected "key: value"`, e.line)
	}
	m := doc.Content[0]
	switch {
	case m.Kind == yaml.SequenceNode:
		return "", "", fmt.Errorf("line %d: expected a key: value mapping, not a list", e.line)
	case m.Kind != yaml.MappingNode || len(m.Content) != 2:
		return "", "", fmt.Errorf(`line %d: expected "key: value"`, e.line)
	}
	k, v := m.Content[0], m.Content[1]
	switch {
	case k.Kind != yaml.ScalarNode:
		return "", "", fmt.Errorf("line %d: a key must be text", e.line)
	case k.Value == "":
		return "", "", fmt.Errorf("line %d: empty key", e.line)
	}
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return k.Value, "", nil
		}
		return k.Value, v.Value, nil
	case yaml.MappingNode, yaml.SequenceNode:
		return k.Value, e.source(v), nil
	}
	return "", "", fmt.Errorf("line %d: %s: anchors and aliases are not supported", e.line, k.Value)
}

// source returns the source text of a collection value: a flow collection's
// lines trimmed and joined with spaces, a block's lines dedented by the
// indentation of its first line, without blank lines around either.
func (e entry) source(v *yaml.Node) string {
	lines := slices.Clone(e.lines[v.Line-1:])
	// The node's column counts characters, from 1; what precedes it on its
	// line (the key) becomes indentation.
	if r := []rune(lines[0]); v.Column-1 <= len(r) {
		lines[0] = strings.Repeat(" ", v.Column-1) + string(r[v.Column-1:])
	}
	for len(lines) > 0 && isBlank(lines[len(lines)-1]) {
		lines = lines[:len(lines)-1]
	}
	if v.Style&yaml.FlowStyle != 0 {
		var parts []string
		for _, l := range lines {
			if t := strings.TrimSpace(l); t != "" && t[0] != '#' {
				parts = append(parts, t)
			}
		}
		return strings.Join(parts, " ")
	}
	ind := indentOf(lines[0])
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = dedent(l, ind)
	}
	return strings.Join(out, "\n")
}

// lenient reads an entry YAML rejected whose value starts as plain text or a
// flow collection (see the top of the file) as a folded block scalar; ok is
// false for any other entry.
func (e entry) lenient() (key, val string, ok bool) {
	k, first, found := strings.Cut(e.lines[0], ": ")
	first = strings.TrimSpace(first)
	if !found || k == "" || strings.ContainsAny(k[:1], `"'?-[{`) || first == "" || strings.ContainsAny(first[:1], "\"'|>&*!%@`#") {
		return "", "", false
	}
	ind := "  "
	for _, l := range e.lines[1:] {
		if !isBlank(l) {
			ind = l[:indentOf(l)]
			break
		}
	}
	folded := []string{"v: >-", ind + stripComment(first)}
	for _, l := range e.lines[1:] {
		if !strings.HasPrefix(strings.TrimLeft(l, " \t"), "#") {
			folded = append(folded, stripComment(l))
		}
	}
	var v struct{ V string }
	if yaml.Unmarshal([]byte(strings.Join(folded, "\n")+"\n"), &v) != nil {
		return "", "", false
	}
	return strings.TrimRight(k, " \t"), v.V, true
}

// yamlLine matches the position a YAML error starts with.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// errorf words a YAML error with the file's line number and the key, when
// the entry's first line names one.
func (e entry) errorf(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := e.line
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		line = e.line + min(max(n, 1), len(e.lines)) - 1
		msg = err.Error()[len(m[0]):]
	}
	if k, _, ok := strings.Cut(e.lines[0], ":"); ok && strings.TrimSpace(k) != "" {
		return fmt.Errorf("line %d: %s: %s", line, strings.Trim(strings.TrimSpace(k), `"'`), msg)
	}
	return fmt.Errorf("line %d: %s", line, msg)
}

// stripComment removes a " #" comment from a plain value.
func stripComment(s string) string {
	for i := 1; i < len(s); i++ {
		if s[i] == '#' && (s[i-1] == ' ' || s[i-1] == '\t') {
			return strings.TrimRight(s[:i], " \t")
		}
	}
	return s
}

func isBlank(l string) bool { return strings.TrimLeft(l, " \t") == "" }

func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " \t")) }

// dedent removes up to n leading spaces or tabs.
func dedent(l string, n int) string {
	i := 0
	for i < n && i < len(l) && (l[i] == ' ' || l[i] == '\t') {
		i++
	}
	return l[i:]
}
