package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// Diff rendering of edit's details.
const (
	diffContext  = 3
	maxDiffBytes = 32 << 10
)

// editTool is the built-in "edit": {path, oldText, newText}.
//
// oldText must occur exactly once in the file (overlapping occurrences
// count). It is matched byte for byte; if that finds nothing, it is matched
// again with its line endings adapted to the file's (CRLF files edited with
// LF text and the reverse), and newText gets the same line endings. Only the
// matched bytes change: BOMs, the line endings elsewhere and the file mode
// are kept. Files over MaxWriteBytes and files with NUL bytes are refused.
// The details carry the line numbers of the change and a line diff.
type editTool struct{ w *ws }

func (t *editTool) Spec() provider.Tool {
	return provider.Tool{
		Name:        "edit",
		Description: "Edit a file in the workspace by replacing exact text. The oldText must match exactly (including whitespace) and occur exactly once in the file. Use this for precise, surgical edits.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"path":    map[string]any{"type": "string", "description": "Path to the file to edit (relative to the workspace, or absolute inside it)"},
				"oldText": map[string]any{"type": "string", "description": "Exact text to find and replace (must match exactly and be unique in the file)"},
				"newText": map[string]any{"type": "string", "description": "New text to replace the old text with"},
			},
			"required": []any{"path", "oldText", "newText"},
		},
	}
}

func (t *editTool) Call(ctx context.Context, call Call) (Result, error) {
	p, _, err := stringArg(call.Args, "path", true)
	if err != nil {
		return Result{}, err
	}
	oldText, _, err := stringArg(call.Args, "oldText", true)
	if err != nil {
		return Result{}, err
	}
	newText, _, err := stringArg(call.Args, "newText", true)
	if err != nil {
		return Result{}, err
	}
	if oldText == "" {
		return Result{}, fmt.Errorf("oldText is empty; give the exact text to replace (to write a whole file, use write)")
	}
	rel, err := t.w.resolve(p)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("edit aborted: %w", err)
	}
	root, err := t.w.openRoot()
	if err != nil {
		return Result{}, err
	}
	defer root.Close()

	data, err := t.load(root, p, rel)
	if err != nil {
		return Result{}, err
	}
	content := string(data)
	i, old, repl, err := locate(content, oldText, newText)
	if err != nil {
		return Result{}, fmt.Errorf("%s %q. %s", err.Error(), p, hintOf(err))
	}
	updated := content[:i] + repl + content[i+len(old):]
	if updated == content {
		return Result{}, fmt.Errorf("no changes made to %q: newText is identical to oldText", p)
	}
	if len(updated) > t.w.MaxWriteBytes {
		return Result{}, fmt.Errorf("the edited %q would be %s, over the %s limit", p, formatSize(int64(len(updated))), formatSize(int64(t.w.MaxWriteBytes)))
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("edit aborted: %w", err)
	}
	if _, err := writeFile(root, p, rel, []byte(updated), false); err != nil {
		return Result{}, err
	}

	start := int64(strings.Count(content[:i], "\n")) + 1
	d := lineDiff(content, i, old, repl)
	return Result{
		Content: []message.Block{message.Text(fmt.Sprintf("Successfully replaced text in %s at line %d.", p, start))},
		Details: map[string]any{
			"path":             rel,
			"diff":             d.text,
			"firstChangedLine": d.firstChanged,
			"startLine":        start,
			"oldEndLine":       start + lastLineOffset(old),
			"newEndLine":       start + lastLineOffset(repl),
		},
	}, nil
}

// load reads a regular text file of at most MaxWriteBytes.
func (t *editTool) load(root *os.Root, p, rel string) ([]byte, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return nil, fsError(p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fsError(p, err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%q is a directory, not a file", p)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%q is not a regular file (%s); edit only edits regular files", p, fi.Mode().Type())
	}
	if fi.Size() > int64(t.w.MaxWriteBytes) {
		return nil, fmt.Errorf("%q is %s, over the %s limit for edit; use exec (e.g. sed) to change it", p, formatSize(fi.Size()), formatSize(int64(t.w.MaxWriteBytes)))
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(t.w.MaxWriteBytes)+1))
	if err != nil {
		return nil, fsError(p, err)
	}
	if len(data) > t.w.MaxWriteBytes {
		return nil, fmt.Errorf("%q is over the %s limit for edit; use exec (e.g. sed) to change it", p, formatSize(int64(t.w.MaxWriteBytes)))
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return nil, fmt.Errorf("%q looks like a binary file (it contains NUL bytes); edit only edits text files", p)
	}
	return data, nil
}

// matchError is why oldText could not be placed.
type matchError struct {
	count int // 0: not found; otherwise the number of occurrences (≥ 2)
}

func (e *matchError) Error() string {
	if e.count == 0 {
		return "could not find the exact text in"
	}
	return fmt.Sprintf("found %d occurrences of the text in", e.count)
}

func hintOf(err error) string {
	if e, ok := err.(*matchError); ok && e.count > 0 {
		return "The text must be unique. Please provide more context to make it unique."
	}
	return "The old text must match exactly including all whitespace and newlines; read the file again if unsure of its current content."
}

// locate finds the single occurrence of oldText in content: byte for byte
// first, then with oldText's line endings adapted to the file's. It returns
// the offset, the matched text and the replacement with the same
// adaptation.
func locate(content, oldText, newText string) (int, string, string, error) {
	type variant struct{ old, new string }
	variants := []variant{{oldText, newText}}
	lfOld, lfNew := toLF(oldText), toLF(newText)
	if lfOld != oldText {
		variants = append(variants, variant{lfOld, lfNew})
	}
	if strings.Contains(content, "\r\n") {
		crOld := strings.ReplaceAll(lfOld, "\n", "\r\n")
		if crOld != oldText {
			variants = append(variants, variant{crOld, strings.ReplaceAll(lfNew, "\n", "\r\n")})
		}
	}
	for _, v := range variants {
		i := strings.Index(content, v.old)
		if i < 0 {
			continue
		}
		if strings.Contains(content[i+1:], v.old) {
			return 0, "", "", &matchError{count: max(2, strings.Count(content, v.old))}
		}
		return i, v.old, v.new, nil
	}
	return 0, "", "", &matchError{}
}

func toLF(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

// lastLineOffset is how many lines after its first the last byte of s lies.
func lastLineOffset(s string) int64 {
	if s == "" {
		return 0
	}
	return int64(strings.Count(s[:len(s)-1], "\n"))
}

type diff struct {
	text         string
	firstChanged int64 // in the new file
}

// lineDiff renders the replacement of old at offset i of content by repl as
// a line diff with a few lines of context: " N text" for context, "-N text"
// for removed and "+N text" for added lines (old and new line numbers).
func lineDiff(content string, i int, old, repl string) diff {
	// Widen the replaced span to whole lines of both files.
	ls := strings.LastIndexByte(content[:i], '\n') + 1
	end := i + len(old)
	prefix := content[ls:i]
	suffixOf := func(end int) string { return content[i+len(old) : end] }
	oldBlock, newBlock := content[ls:end], prefix+repl
	if end < len(content) && !(strings.HasSuffix(oldBlock, "\n") && strings.HasSuffix(newBlock, "\n")) {
		if nl := strings.IndexByte(content[end:], '\n'); nl >= 0 {
			end += nl + 1
		} else {
			end = len(content)
		}
		oldBlock = content[ls:end]
	}
	newBlock = prefix + repl + suffixOf(end)
	oldLines, newLines := splitLines(oldBlock), splitLines(newBlock)

	first := int64(strings.Count(content[:ls], "\n")) + 1
	// Lines equal at both ends of the blocks are context, not change.
	for len(oldLines) > 0 && len(newLines) > 0 && oldLines[0] == newLines[0] {
		oldLines, newLines = oldLines[1:], newLines[1:]
		first++
	}
	for len(oldLines) > 0 && len(newLines) > 0 && oldLines[len(oldLines)-1] == newLines[len(newLines)-1] {
		oldLines, newLines = oldLines[:len(oldLines)-1], newLines[:len(newLines)-1]
	}

	all := splitLines(content)
	width := len(strconv.Itoa(len(all) + len(newLines) + 1))
	var b strings.Builder
	line := func(mark byte, n int64, s string) {
		if b.Len() > maxDiffBytes {
			return
		}
		fmt.Fprintf(&b, "%c%*d %s\n", mark, width, n, strings.TrimSuffix(s, "\r"))
	}
	before := max(first-1-diffContext, 0)
	if before > 0 {
		fmt.Fprintf(&b, " %*s ...\n", width, "")
	}
	for n := before; n < first-1 && n < int64(len(all)); n++ {
		line(' ', n+1, all[n])
	}
	for k, s := range oldLines {
		line('-', first+int64(k), s)
	}
	for k, s := range newLines {
		line('+', first+int64(k), s)
	}
	after := first - 1 + int64(len(oldLines)) // index in all of the first line after the change
	shift := int64(len(newLines) - len(oldLines))
	for n := after; n < after+diffContext && n < int64(len(all)); n++ {
		line(' ', n+1+shift, all[n])
	}
	if after+diffContext < int64(len(all)) {
		fmt.Fprintf(&b, " %*s ...\n", width, "")
	}
	text := strings.TrimSuffix(b.String(), "\n")
	if b.Len() > maxDiffBytes {
		text = strings.ToValidUTF8(text[:maxDiffBytes], "") + "\n... (diff truncated)"
	}
	return diff{text: strings.ToValidUTF8(text, "\uFFFD"), firstChanged: first}
}

// splitLines splits s into lines; a final newline ends the last line.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
