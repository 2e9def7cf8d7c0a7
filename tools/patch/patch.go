// Package patch parses and applies the multi-file patch format of OpenAI's
// Codex and OpenClaw agents' apply_patch tool, as pure functions: text in,
// operations or file contents out. The tool that reads and writes the
// workspace is tools' apply_patch.
//
// The format:
//
//	*** Begin Patch
//	*** Add File: path          then the file's lines, each prefixed "+"
//	*** Delete File: path
//	*** Update File: path
//	*** Move to: new/path       optional, right after Update File
//	@@ optional context line    a hunk; the first hunk may omit "@@"
//	 context line               " " context, "-" removed, "+" added
//	*** End of File             optional: the hunk ends at the file's end
//	*** End Patch
//
// Parsing is lenient where models slip in practice, as the reference's is:
// the whole text and the marker lines may carry surrounding whitespace, a
// patch wrapped in a shell heredoc (<<'EOF' … EOF) is unwrapped, CRLF line
// ends are read as LF, and an empty line inside a hunk is an empty context
// line. A hunk's lines are found in the file first exactly, then ignoring
// trailing whitespace, then surrounding whitespace, then typographic
// dashes, quotes and spaces.
//
// Files: patch.go holds the parser, apply.go the application of a file's
// hunks.
package patch

import (
	"fmt"
	"strings"
)

// Markers of the format.
const (
	beginPatch = "*** Begin Patch"
	endPatch   = "*** End Patch"
	addFile    = "*** Add File:"
	deleteFile = "*** Delete File:"
	updateFile = "*** Update File:"
	moveTo     = "*** Move to:"
	endOfFile  = "*** End of File"
)

// Kind is what an operation does to its file.
type Kind int

// The operations.
const (
	Add Kind = iota + 1
	Delete
	Update
)

func (k Kind) String() string {
	switch k {
	case Add:
		return "add"
	case Delete:
		return "delete"
	case Update:
		return "update"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Op is one file operation of a patch.
type Op struct {
	Kind Kind
	Path string
	// MoveTo is an update's new path; "" keeps the file where it is.
	MoveTo string
	// Contents is an added file's content: its lines, each ending in "\n".
	Contents string
	// Chunks are an update's hunks, in order.
	Chunks []Chunk
	// Line is the 1-based line of the operation's header in the patch.
	Line int
}

// Chunk is one hunk of an update.
type Chunk struct {
	// Context is the text after "@@ ", a line to find before the hunk's
	// lines ("" for none).
	Context string
	// Old are the lines the hunk replaces (context and "-" lines), New
	// the lines replacing them (context and "+" lines).
	Old, New []string
	// EOF marks a hunk that ends at the end of the file.
	EOF bool
	// Line is the 1-based line of the hunk's first line in the patch.
	Line int
}

// ParseError is a patch that does not parse.
type ParseError struct {
	Line int // 1-based line of the patch; 0 for the patch as a whole
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return "invalid patch: " + e.Msg
	}
	return fmt.Sprintf("invalid patch at line %d: %s", e.Line, e.Msg)
}

// MaxOps bounds the operations of one patch.
const MaxOps = 1000

// Parse reads a patch. Errors are *ParseError, naming the line and what
// was expected there.
func Parse(text string) ([]Op, error) {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	first := 1 // the patch line number of lines[0]
	if len(lines) >= 4 && isHeredoc(lines[0]) && strings.HasSuffix(strings.TrimSpace(lines[len(lines)-1]), "EOF") {
		lines, first = lines[1:len(lines)-1], 2
	}
	if strings.TrimSpace(lines[0]) != beginPatch {
		return nil, &ParseError{Line: first, Msg: fmt.Sprintf("the first line must be %q, got %q", beginPatch, clip(lines[0]))}
	}
	if len(lines) < 2 || strings.TrimSpace(lines[len(lines)-1]) != endPatch {
		return nil, &ParseError{Line: first + len(lines) - 1, Msg: fmt.Sprintf("the last line must be %q", endPatch)}
	}
	p := parser{lines: lines[1 : len(lines)-1], first: first + 1}
	var ops []Op
	for p.i < len(p.lines) {
		if strings.TrimSpace(p.lines[p.i]) == "" {
			p.i++
			continue
		}
		if len(ops) == MaxOps {
			return nil, &ParseError{Line: p.line(), Msg: fmt.Sprintf("more than %d file operations; split the patch", MaxOps)}
		}
		op, err := p.op()
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil, &ParseError{Msg: "the patch has no file operations (*** Add File:, *** Delete File: or *** Update File:)"}
	}
	return ops, nil
}

func isHeredoc(l string) bool {
	switch strings.TrimSpace(l) {
	case "<<EOF", "<<'EOF'", `<<"EOF"`:
		return true
	}
	return false
}

type parser struct {
	lines []string
	i     int
	first int // the patch line number of lines[0]
}

func (p *parser) line() int { return p.first + p.i }

func (p *parser) op() (Op, error) {
	head := strings.TrimSpace(p.lines[p.i])
	op := Op{Line: p.line()}
	switch {
	case strings.HasPrefix(head, addFile):
		op.Kind, op.Path = Add, strings.TrimSpace(head[len(addFile):])
		p.i++
		var b strings.Builder
		for p.i < len(p.lines) && strings.HasPrefix(p.lines[p.i], "+") {
			b.WriteString(p.lines[p.i][1:])
			b.WriteByte('\n')
			p.i++
		}
		op.Contents = b.String()
	case strings.HasPrefix(head, deleteFile):
		op.Kind, op.Path = Delete, strings.TrimSpace(head[len(deleteFile):])
		p.i++
	case strings.HasPrefix(head, updateFile):
		op.Kind, op.Path = Update, strings.TrimSpace(head[len(updateFile):])
		p.i++
		if p.i < len(p.lines) {
			if m, ok := strings.CutPrefix(strings.TrimSpace(p.lines[p.i]), moveTo); ok {
				op.MoveTo = strings.TrimSpace(m)
				if op.MoveTo == "" {
					return Op{}, &ParseError{Line: p.line(), Msg: "*** Move to: without a path"}
				}
				p.i++
			}
		}
		for p.i < len(p.lines) {
			l := p.lines[p.i]
			if strings.TrimSpace(l) == "" {
				p.i++
				continue
			}
			if strings.HasPrefix(l, "***") {
				break
			}
			c, err := p.chunk(len(op.Chunks) == 0)
			if err != nil {
				return Op{}, err
			}
			op.Chunks = append(op.Chunks, c)
		}
		if len(op.Chunks) == 0 {
			return Op{}, &ParseError{Line: op.Line, Msg: fmt.Sprintf("*** Update File: %s has no hunks; give at least one @@ hunk of context, - and + lines", op.Path)}
		}
	default:
		return Op{}, &ParseError{Line: p.line(), Msg: fmt.Sprintf("%q is not a file operation; expected *** Add File: path, *** Delete File: path or *** Update File: path", clip(p.lines[p.i]))}
	}
	if op.Path == "" {
		return Op{}, &ParseError{Line: op.Line, Msg: "a file operation without a path"}
	}
	return op, nil
}

// chunk reads one hunk at p.i; first allows a missing "@@" line.
func (p *parser) chunk(first bool) (Chunk, error) {
	c := Chunk{Line: p.line()}
	switch l := p.lines[p.i]; {
	case strings.TrimRight(l, " \t") == "@@":
		p.i++
	case strings.HasPrefix(l, "@@ "):
		c.Context = l[3:]
		p.i++
	case !first:
		return Chunk{}, &ParseError{Line: p.line(), Msg: fmt.Sprintf("expected a hunk starting with @@, got %q", clip(l))}
	}
	n := 0
	for ; p.i < len(p.lines); p.i++ {
		l := p.lines[p.i]
		if strings.TrimSpace(l) == endOfFile {
			if n == 0 {
				return Chunk{}, &ParseError{Line: p.line(), Msg: "a hunk with no lines before *** End of File"}
			}
			c.EOF = true
			p.i++
			break
		}
		if l == "" {
			c.Old, c.New = append(c.Old, ""), append(c.New, "")
			n++
			continue
		}
		switch l[0] {
		case ' ':
			c.Old, c.New = append(c.Old, l[1:]), append(c.New, l[1:])
		case '-':
			c.Old = append(c.Old, l[1:])
		case '+':
			c.New = append(c.New, l[1:])
		default:
			if n == 0 {
				return Chunk{}, &ParseError{Line: p.line(), Msg: fmt.Sprintf("unexpected line %q in a hunk: every line of a hunk starts with ' ' (context), '-' (removed) or '+' (added)", clip(l))}
			}
			return c, nil
		}
		n++
	}
	if n == 0 {
		return Chunk{}, &ParseError{Line: c.Line, Msg: "a hunk with no lines"}
	}
	return c, nil
}

// clip shortens a line quoted in an error.
func clip(s string) string {
	const max = 120
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}
