package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// sniffLen is how much of a file read inspects to tell images and binary
// files from text.
const sniffLen = 8 << 10

// readTool is the built-in "read": {path, offset?, limit?}.
//
// Text is returned by lines: from line offset (1-based, default 1; 0 counts
// as 1), at most limit lines, and never more than MaxReadLines lines or
// MaxReadBytes bytes; a truncated answer ends with a notice naming the next
// offset. Reading streams the file, so its size does not matter. A first line
// alone over MaxReadBytes is not shown; the notice suggests exec instead.
// PNG, JPEG, GIF and WebP files (recognised by content) come back as an
// image block; other binary files are refused with an error that says so.
// Invalid UTF-8 in text is replaced by U+FFFD.
type readTool struct{ w *ws }

func (t *readTool) Spec() provider.Tool {
	return provider.Tool{
		Name: "read",
		Description: fmt.Sprintf("Read the contents of a file in the workspace. Supports text files and images (png, jpeg, gif, webp); images are returned as attachments. "+
			"Text output is truncated to %d lines or %s (whichever is hit first). Use offset/limit for large files; when you need the full file, continue with offset until complete.",
			t.w.MaxReadLines, formatSize(int64(t.w.MaxReadBytes))),
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"path":   map[string]any{"type": "string", "description": "Path to the file to read (relative to the workspace, or absolute inside it)"},
				"offset": map[string]any{"type": "integer", "description": "Line number to start reading from (1-indexed)"},
				"limit":  map[string]any{"type": "integer", "description": "Maximum number of lines to read"},
			},
			"required": []any{"path"},
		},
	}
}

func (t *readTool) Call(ctx context.Context, call Call) (Result, error) {
	a, err := parseReadArgs(call.Args)
	if err != nil {
		return Result{}, err
	}
	p, offset, limit, hasLimit := a.path, a.offset, a.limit, a.hasLimit
	rel, err := t.w.resolve(p)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("read aborted: %w", err)
	}
	root, err := t.w.openRoot()
	if err != nil {
		return Result{}, err
	}
	defer root.Close()
	// Non-blocking open: a FIFO must not hang the call before the mode
	// check below can refuse it.
	f, err := root.OpenFile(rel, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return Result{}, fsError(p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Result{}, fsError(p, err)
	}
	if fi.IsDir() {
		return Result{}, fmt.Errorf("%q is a directory, not a file; use exec (e.g. ls) to list it", p)
	}
	if !fi.Mode().IsRegular() {
		return Result{}, fmt.Errorf("%q is not a regular file (%s); read only reads regular files", p, fi.Mode().Type())
	}

	sniff := make([]byte, sniffLen)
	n, err := io.ReadFull(f, sniff)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return Result{}, fsError(p, err)
	}
	sniff = sniff[:n]
	all := io.MultiReader(bytes.NewReader(sniff), f)

	if mime := imageType(sniff); mime != "" {
		return t.image(p, rel, mime, fi.Size(), all)
	}
	if looksBinary(sniff) {
		return Result{}, fmt.Errorf("%q looks like a binary file (%s), so it is not shown; use exec to inspect it (e.g. file, or xxd | head)", p, formatSize(fi.Size()))
	}

	want := int64(t.w.MaxReadLines)
	if hasLimit {
		want = min(want, limit)
	}
	win, err := readWindow(ctx, all, offset-1, want, int64(t.w.MaxReadBytes))
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("read aborted: %w", ctx.Err())
		}
		return Result{}, fsError(p, err)
	}
	if offset > win.total && !(offset == 1 && win.total == 0) {
		return Result{}, fmt.Errorf("offset %d is beyond the end of %q (%d lines total)", offset, p, win.total)
	}

	text, details := t.w.present(a, rel, win)
	return Result{Content: []message.Block{message.Text(text)}, Details: details}, nil
}

// readArgs are a read call's arguments: offset is 1-based, at least 1.
type readArgs struct {
	path          string
	offset, limit int64
	hasLimit      bool
}

// parseReadArgs reads and checks a read call's arguments.
func parseReadArgs(args map[string]any) (readArgs, error) {
	var a readArgs
	var err error
	if a.path, _, err = stringArg(args, "path", true); err != nil {
		return readArgs{}, err
	}
	if a.offset, _, err = intArg(args, "offset"); err != nil {
		return readArgs{}, err
	}
	if a.offset < 0 {
		return readArgs{}, fmt.Errorf("offset must be a line number of 1 or more, got %d", a.offset)
	}
	a.offset = max(a.offset, 1)
	if a.limit, a.hasLimit, err = intArg(args, "limit"); err != nil {
		return readArgs{}, err
	}
	if a.hasLimit && a.limit < 1 {
		return readArgs{}, fmt.Errorf("limit must be 1 or more, got %d", a.limit)
	}
	return a, nil
}

// present is the text the model gets for a window of the file a.path
// (rel in the workspace) and the result's details: the lines, or a note
// for an empty file or a first line over the byte limit, followed by how
// to read on when the window stopped short of the end.
func (w *ws) present(a readArgs, rel string, win window) (string, map[string]any) {
	first := a.offset
	last := a.offset + win.lines - 1
	details := map[string]any{"path": rel, "totalLines": win.total, "startLine": first, "endLine": last, "truncated": win.stop != ""}
	var text string
	switch {
	case win.total == 0:
		text = "[Empty file]"
	case win.firstTooLong:
		details["truncatedBy"] = "bytes"
		text = fmt.Sprintf("[Line %d is %s, over the %s read limit. Use exec to see part of it, e.g. sed -n '%dp' %s | head -c %d]",
			first, formatSize(win.firstLen), formatSize(int64(w.MaxReadBytes)), first, shellQuote(a.path), w.MaxReadBytes)
	case win.stop == "bytes":
		details["truncatedBy"] = "bytes"
		text = fmt.Sprintf("%s\n\n[Showing lines %d-%d of %d (%s limit). Use offset=%d to continue.]",
			win.text, first, last, win.total, formatSize(int64(w.MaxReadBytes)), last+1)
	case win.stop == "lines" && a.hasLimit && a.limit <= int64(w.MaxReadLines):
		details["truncated"] = false
		text = fmt.Sprintf("%s\n\n[%d more lines in file. Use offset=%d to continue.]", win.text, win.total-last, last+1)
	case win.stop == "lines":
		details["truncatedBy"] = "lines"
		text = fmt.Sprintf("%s\n\n[Showing lines %d-%d of %d. Use offset=%d to continue.]", win.text, first, last, win.total, last+1)
	default:
		text = win.text
	}
	return text, details
}

// image returns an image file as a text note and an image block.
func (t *readTool) image(p, rel, mime string, size int64, r io.Reader) (Result, error) {
	if size > int64(t.w.MaxImageBytes) {
		return Result{}, fmt.Errorf("image %q is %s, over the %s limit for images sent to the model; use exec to make a smaller copy if you need to see it", p, formatSize(size), formatSize(int64(t.w.MaxImageBytes)))
	}
	data, err := io.ReadAll(io.LimitReader(r, int64(t.w.MaxImageBytes)+1))
	if err != nil {
		return Result{}, fsError(p, err)
	}
	if len(data) > t.w.MaxImageBytes {
		return Result{}, fmt.Errorf("image %q is over the %s limit for images sent to the model", p, formatSize(int64(t.w.MaxImageBytes)))
	}
	return Result{
		Content: []message.Block{
			message.Text(fmt.Sprintf("Read image file [%s]", mime)),
			message.Image(mime, base64.StdEncoding.EncodeToString(data)),
		},
		Details: map[string]any{"path": rel, "mimeType": mime, "bytes": int64(len(data))},
	}, nil
}

// window is the part of a text file one read returns.
type window struct {
	text         string
	lines        int64 // lines in text
	total        int64 // lines in the file
	stop         string
	firstTooLong bool
	firstLen     int64
}

// readWindow streams r and keeps up to want lines from line index start
// (0-based) within maxBytes bytes (newlines between lines included), while
// counting every line of r. A final newline ends the last line rather than
// starting an empty one. stop is "lines" when lines remained after want
// lines, "bytes" when the next line would not fit, "" otherwise. Memory
// stays within maxBytes plus a buffer, whatever the size of r or its lines.
func readWindow(ctx context.Context, r io.Reader, start, want, maxBytes int64) (window, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		w       window
		out     []byte
		cur     []byte // current line, kept only up to maxBytes+1 bytes
		curLen  int64
		inLine  bool
		idx     int64 // index of the current line
		collect = true
	)
	for collect {
		if err := ctx.Err(); err != nil {
			return w, err
		}
		frag, err := br.ReadSlice('\n')
		if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
			return w, err
		}
		ended := len(frag) > 0 && frag[len(frag)-1] == '\n'
		content := frag
		if ended {
			content = frag[:len(frag)-1]
		}
		if len(frag) > 0 {
			inLine = true
		}
		if idx >= start && int64(len(cur)) <= maxBytes {
			cur = append(cur, content[:min(int64(len(content)), maxBytes+1-int64(len(cur)))]...)
		}
		curLen += int64(len(content))
		if ended || (err == io.EOF && inLine) {
			if idx >= start {
				add := curLen
				if w.lines > 0 {
					add++
				}
				switch {
				case w.lines == want:
					collect, w.stop = false, "lines"
				case int64(len(out))+add > maxBytes:
					collect, w.stop = false, "bytes"
					if w.lines == 0 {
						w.firstTooLong, w.firstLen = true, curLen
					}
				default:
					if w.lines > 0 {
						out = append(out, '\n')
					}
					out = append(out, cur...)
					w.lines++
				}
			}
			idx++
			cur, curLen, inLine = cur[:0], 0, false
		}
		if err == io.EOF {
			w.total = idx
			w.text = strings.ToValidUTF8(string(out), "\uFFFD")
			return w, nil
		}
	}
	// The window is complete and we are at a line boundary: count the
	// remaining lines without keeping them.
	rest, err := countLines(ctx, br)
	if err != nil {
		return w, err
	}
	w.total = idx + rest
	w.text = strings.ToValidUTF8(string(out), "\uFFFD")
	return w, nil
}

// countLines counts the lines left in br, a last one without a newline
// included.
func countLines(ctx context.Context, br *bufio.Reader) (int64, error) {
	buf := make([]byte, 64<<10)
	var n int64
	var last byte = '\n'
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, err := br.Read(buf)
		if k > 0 {
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}

// imageType recognises the image formats models accept by their magic
// bytes, returning the MIME type or "".
func imageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}):
		return "image/jpeg"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "image/gif"
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

// looksBinary reports whether the start of a file is not text: it holds a
// NUL byte, or more than a tenth of it is invalid UTF-8 or control
// characters other than whitespace and escape.
func looksBinary(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	bad, total := 0, 0
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 && !utf8.FullRune(b[i:]) {
			break // a character cut by the end of the sample
		}
		total++
		switch {
		case r == utf8.RuneError && size == 1:
			bad++
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r' && r != '\f' && r != '\v' && r != 0x1b, r == 0x7f:
			bad++
		}
		i += size
	}
	return bad*10 > total
}

// formatSize renders a byte count as B, KB or MB.
func formatSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%dB", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1fKB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1fMB", float64(n)/(1<<20))
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Idempotent implements Idempotent: reading changes nothing.
func (t *readTool) Idempotent() bool { return true }
