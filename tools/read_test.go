package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
)

func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestReadText(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.MaxReadLines = 5; w.MaxReadBytes = 60 })
	f.file("ten.txt", numbered(10))
	f.file("three.txt", "a\nb\nc")
	f.file("empty.txt", "")
	f.file("crlf.txt", "a\r\nb\r\n")
	f.file("blank-lines.txt", "\n\n\n")
	f.file("bad-utf8.txt", "mostly fine text \xff\xfe ok\n")
	f.file("long.txt", strings.Repeat("x", 100)+"\nshort\n")
	f.file("wide.txt", strings.Repeat("y", 25)+"\n"+strings.Repeat("z", 25)+"\n"+strings.Repeat("w", 25)+"\n")
	f.file("sub/dir/deep.txt", "deep\n")
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"whole", map[string]any{"path": "three.txt"}, "a\nb\nc"},
		{"final newline is no extra line", map[string]any{"path": "sub/dir/deep.txt"}, "deep"},
		{"absolute inside", map[string]any{"path": filepath.Join(f.dir, "three.txt")}, "a\nb\nc"},
		{"line cap", map[string]any{"path": "ten.txt"}, "line 1\nline 2\nline 3\nline 4\nline 5\n\n[Showing lines 1-5 of 10. Use offset=6 to continue.]"},
		{"offset continues", map[string]any{"path": "ten.txt", "offset": 6}, "line 6\nline 7\nline 8\nline 9\nline 10"},
		{"offset and limit", map[string]any{"path": "ten.txt", "offset": 3, "limit": 2}, "line 3\nline 4\n\n[6 more lines in file. Use offset=5 to continue.]"},
		{"limit over cap", map[string]any{"path": "ten.txt", "limit": 50}, "line 1\nline 2\nline 3\nline 4\nline 5\n\n[Showing lines 1-5 of 10. Use offset=6 to continue.]"},
		{"limit reaching the end", map[string]any{"path": "ten.txt", "offset": 9, "limit": 2}, "line 9\nline 10"},
		{"offset 0 is the start", map[string]any{"path": "three.txt", "offset": 0}, "a\nb\nc"},
		{"last line", map[string]any{"path": "three.txt", "offset": 3}, "c"},
		{"empty", map[string]any{"path": "empty.txt"}, "[Empty file]"},
		{"crlf kept", map[string]any{"path": "crlf.txt"}, "a\r\nb\r"},
		{"blank lines", map[string]any{"path": "blank-lines.txt"}, "\n\n"},
		{"invalid utf-8", map[string]any{"path": "bad-utf8.txt"}, "mostly fine text \uFFFD ok"},
		{"first line too long", map[string]any{"path": "long.txt"}, "[Line 1 is 100B, over the 60B read limit. Use exec to see part of it, e.g. sed -n '1p' 'long.txt' | head -c 60]"},
		{"after the long line", map[string]any{"path": "long.txt", "offset": 2}, "short"},
		{"byte cap", map[string]any{"path": "wide.txt"}, strings.Repeat("y", 25) + "\n" + strings.Repeat("z", 25) + "\n\n[Showing lines 1-2 of 3 (60B limit). Use offset=3 to continue.]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := f.call("read", tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || len(res.Content) != 1 {
				t.Fatalf("unexpected result %+v", res)
			}
			if got := text(res); got != tt.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestReadDetails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.MaxReadLines = 5 })
	f.file("d/ten.txt", numbered(10))
	res := f.mustCall("read", map[string]any{"path": "./d/../d/ten.txt", "offset": 2})
	want := map[string]any{"path": "d/ten.txt", "totalLines": int64(10), "startLine": int64(2), "endLine": int64(6), "truncated": true, "truncatedBy": "lines"}
	if fmt.Sprint(res.Details) != fmt.Sprint(want) {
		t.Fatalf("details %v, want %v", res.Details, want)
	}
}

func TestReadErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.file("three.txt", "a\nb\nc\n")
	f.file("bin.dat", "\x7fELF\x02\x01\x01\x00\x00\x00")
	f.file("noise.dat", strings.Repeat("\x01\x02\x03abc", 100))
	f.file("dir/x.txt", "x")
	mkfifo(t, filepath.Join(f.dir, "fifo"))
	tests := []struct {
		path   string
		offset any
		want   []string
	}{
		{"missing.txt", nil, []string{`file not found: "missing.txt"`}},
		{"three.txt/x", nil, []string{`"three.txt/x"`}},
		{"three.txt", 4, []string{`offset 4 is beyond the end of "three.txt" (3 lines total)`}},
		{"bin.dat", nil, []string{`"bin.dat" looks like a binary file (10B)`, "exec"}},
		{"noise.dat", nil, []string{"binary"}},
		{"dir", nil, []string{`"dir" is a directory`}},
		{".", nil, []string{`"." is a directory`}},
		{"fifo", nil, []string{`"fifo" is not a regular file`}},
	}
	for _, tt := range tests {
		args := map[string]any{"path": tt.path}
		if tt.offset != nil {
			args["offset"] = tt.offset
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := f.call("read", args)
			wantErr(t, err, tt.want...)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second): // detects a hang only
			t.Fatalf("read %q hangs", tt.path)
		}
	}
}

func TestReadImage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.MaxImageBytes = 4 << 10 })
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{255, 0, 0, 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	f.file("pic.dat", buf.String()) // recognised by content, not name
	f.file("photo.jpg", "\xff\xd8\xff\xe0rest")
	f.file("anim.gif", "GIF89a....")
	f.file("w.webp", "RIFF\x10\x00\x00\x00WEBPVP8 ")
	f.file("big.png", "\x89PNG\r\n\x1a\n"+strings.Repeat("\x00", 5<<10))

	res := f.mustCall("read", map[string]any{"path": "pic.dat", "offset": 3}) // offset is ignored for images
	if len(res.Content) != 2 || res.Content[0].Text != "Read image file [image/png]" {
		t.Fatalf("content %+v", res.Content)
	}
	im := res.Content[1]
	if im.Type != message.BlockImage || im.MimeType != "image/png" {
		t.Fatalf("image block %+v", im)
	}
	if data, err := base64.StdEncoding.DecodeString(im.Data); err != nil || !bytes.Equal(data, buf.Bytes()) {
		t.Fatalf("image data does not round-trip: %v", err)
	}
	if res.Details["mimeType"] != "image/png" || res.Details["bytes"] != int64(buf.Len()) {
		t.Fatalf("details %v", res.Details)
	}
	for path, mime := range map[string]string{"photo.jpg": "image/jpeg", "anim.gif": "image/gif", "w.webp": "image/webp"} {
		res := f.mustCall("read", map[string]any{"path": path})
		if len(res.Content) != 2 || res.Content[1].MimeType != mime {
			t.Errorf("%s: %+v", path, res.Content)
		}
	}
	_, err := f.call("read", map[string]any{"path": "big.png"})
	wantErr(t, err, `image "big.png" is 5.0KB, over the 4.0KB limit`)
}

// TestReadLargeFile streams a file far over the caps: the answer stays
// within them and the line count is exact.
func TestReadLargeFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const lines = 200_000
	f.file("big.txt", numbered(lines))
	res := f.mustCall("read", map[string]any{"path": "big.txt", "offset": 150_000})
	got := text(res)
	if len(got) > DefaultMaxReadBytes+200 {
		t.Fatalf("answer is %d bytes", len(got))
	}
	if !strings.HasPrefix(got, "line 150000\n") || !strings.Contains(got, fmt.Sprintf("[Showing lines 150000-151999 of %d. Use offset=152000 to continue.]", lines)) {
		t.Fatalf("unexpected answer: %q...%q", got[:40], got[len(got)-120:])
	}
	// One line of 3 MB with no newline at all.
	f.file("oneline.txt", strings.Repeat("m", 3<<20))
	res = f.mustCall("read", map[string]any{"path": "oneline.txt"})
	if got := text(res); !strings.HasPrefix(got, "[Line 1 is 3.0MB") {
		t.Fatalf("got %q", got)
	}
	if res.Details["totalLines"] != int64(1) {
		t.Fatalf("details %v", res.Details)
	}
}

func TestReadWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in               string
		start, want, max int64
		text             string
		lines, total     int64
		stop             string
		firstTooLong     bool
	}{
		{in: "", want: 5, max: 100, total: 0},
		{in: "a", want: 5, max: 100, text: "a", lines: 1, total: 1},
		{in: "a\n", want: 5, max: 100, text: "a", lines: 1, total: 1},
		{in: "a\n\n", want: 5, max: 100, text: "a\n", lines: 2, total: 2},
		{in: "a\nb\nc\nd", want: 2, max: 100, text: "a\nb", lines: 2, total: 4, stop: "lines"},
		{in: "a\nb\nc\nd\n", start: 1, want: 2, max: 100, text: "b\nc", lines: 2, total: 4, stop: "lines"},
		{in: "a\nb\nc\nd", start: 2, want: 2, max: 100, text: "c\nd", lines: 2, total: 4},
		{in: "aa\nbb\ncc\n", want: 9, max: 5, text: "aa\nbb", lines: 2, total: 3, stop: "bytes"},
		{in: "aa\nbb\ncc\n", want: 9, max: 4, text: "aa", lines: 1, total: 3, stop: "bytes"},
		{in: "aaaa\nb", want: 9, max: 3, lines: 0, total: 2, stop: "bytes", firstTooLong: true},
		{in: "x\ny", start: 5, want: 1, max: 10, total: 2},
	}
	for _, tt := range tests {
		w, err := readWindow(context.Background(), strings.NewReader(tt.in), tt.start, tt.want, tt.max)
		if err != nil {
			t.Fatal(err)
		}
		if w.text != tt.text || w.lines != tt.lines || w.total != tt.total || w.stop != tt.stop || w.firstTooLong != tt.firstTooLong {
			t.Errorf("readWindow(%q, %d, %d, %d) = %+v", tt.in, tt.start, tt.want, tt.max, w)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := readWindow(ctx, strings.NewReader("a\nb"), 0, 1, 10); err == nil {
		t.Fatal("a cancelled read must fail")
	}
}

func TestLooksBinary(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"":                                     false,
		"plain text\n":                         false,
		"tabs\tand\r\nCRLF\f":                  false,
		"ünïcödé 日本語 🎉":                        false,
		"\x1b[31mred\x1b[0m":                   false,
		"日本"[:4]:                               false, // a character cut by the sample's end
		"nul\x00":                              true,
		"\xff\xfe\xfd\xfc":                     true,
		strings.Repeat("\x01", 3) + "abcdefgh": true,
		"latin-1 caf\xe9 ok, mostly ascii":     false,
	} {
		if got := looksBinary([]byte(in)); got != want {
			t.Errorf("looksBinary(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestReadAborted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.file("a.txt", "a\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.callCtx(ctx, "read", map[string]any{"path": "a.txt"})
	wantErr(t, err, "aborted")
}

func TestReadUnreadable(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root reads every file")
	}
	f := newFixture(t)
	p := f.file("locked.txt", "x")
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	_, err := f.call("read", map[string]any{"path": "locked.txt"})
	wantErr(t, err, `permission denied: "locked.txt"`)
}
