package tools

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.MaxWriteBytes = 1 << 10 })
	f.file("exists.sh", "old content that is longer\n")
	if err := os.Chmod(filepath.Join(f.dir, "exists.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, content string
		file                string // the file that must hold content
		created             bool
	}{
		{"new", "new.txt", "hello\n", "new.txt", true},
		{"parents", "a/b/c/new.txt", "deep", "a/b/c/new.txt", true},
		{"absolute inside", filepath.Join(f.dir, "abs.txt"), "abs", "abs.txt", true},
		{"overwrite shorter", "exists.sh", "new\n", "exists.sh", false},
		{"empty content", "empty.txt", "", "empty.txt", true},
		{"binary content", "bin.dat", "\x00\x01\xff", "bin.dat", true},
		{"at the cap", "cap.txt", strings.Repeat("c", 1<<10), "cap.txt", true},
		{"dot segments", "x/../dots.txt", "d", "dots.txt", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := f.call("write", map[string]any{"path": tt.path, "content": tt.content})
			if err != nil {
				t.Fatal(err)
			}
			if want := "Successfully wrote " + strconv.Itoa(len(tt.content)) + " bytes to " + tt.path; text(res) != want {
				t.Fatalf("text %q, want %q", text(res), want)
			}
			if res.Details["path"] != tt.file || res.Details["created"] != tt.created || res.Details["bytes"] != int64(len(tt.content)) {
				t.Fatalf("details %v", res.Details)
			}
			if got := f.content(tt.file); got != tt.content {
				t.Fatalf("file holds %q", got)
			}
		})
	}
	if fi, err := os.Stat(filepath.Join(f.dir, "exists.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("overwrite changed the mode: %v %v", fi.Mode(), err)
	}
}

func TestWriteErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.MaxWriteBytes = 1 << 10 })
	f.file("file.txt", "x")
	f.file("dir/keep.txt", "keep")
	mkfifo(t, filepath.Join(f.dir, "fifo"))
	tests := []struct {
		path, content string
		want          []string
	}{
		{"big.txt", strings.Repeat("b", 1<<10+1), []string{`content for "big.txt" is 1.0KB, over the 1.0KB write limit`}},
		{"dir", "x", []string{`"dir" is a directory`}},
		{".", "x", []string{"workspace directory itself"}},
		{"newdir/", "x", []string{`path "newdir/" ends with a slash`}},
		{"file.txt/child.txt", "x", []string{"file.txt"}},
		{"fifo", "x", []string{`"fifo" is not a regular file`}},
	}
	for _, tt := range tests {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := f.call("write", map[string]any{"path": tt.path, "content": tt.content})
			wantErr(t, err, tt.want...)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second): // detects a hang only
			t.Fatalf("write %q hangs", tt.path)
		}
	}
	if _, err := os.Stat(filepath.Join(f.dir, "big.txt")); !os.IsNotExist(err) {
		t.Fatal("an over-limit write created the file")
	}
	if f.content("file.txt") != "x" || f.content("dir/keep.txt") != "keep" {
		t.Fatal("a failed write changed a file")
	}
}
