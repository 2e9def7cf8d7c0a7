package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEdit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, before, oldText, newText, after string
		line                                  int64
	}{
		{"middle", "a\nb\nc\n", "b", "B", "a\nB\nc\n", 2},
		{"multi-line", "one\ntwo\nthree\nfour\n", "two\nthree", "2\n3\n3.5", "one\n2\n3\n3.5\nfour\n", 2},
		{"delete lines", "keep\ndrop\nkeep too\n", "drop\n", "", "keep\nkeep too\n", 2},
		{"no final newline", "x = 1", "1", "2", "x = 2", 1},
		{"dollar signs are literal", "v := a\n", "a", "$1 ${x} $$", "v := $1 ${x} $$\n", 1},
		{"crlf file, lf oldText", "a\r\nb\r\nc\r\n", "a\nb", "x\ny", "x\r\ny\r\nc\r\n", 1},
		{"lf file, crlf oldText", "a\nb\nc\n", "b\r\nc", "B\r\nC", "a\nB\nC\n", 2},
		{"mixed endings kept", "a\r\nb\nc\r\n", "b", "B", "a\r\nB\nc\r\n", 2},
		{"bom kept", "\ufeffhello\n", "hello", "bye", "\ufeffbye\n", 1},
		{"invalid utf-8 around", "\xff\xfe\nkey=old\n\xfd", "old", "new", "\xff\xfe\nkey=new\n\xfd", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.file("f.txt", tt.before)
			res, err := f.call("edit", map[string]any{"path": "f.txt", "oldText": tt.oldText, "newText": tt.newText})
			if err != nil {
				t.Fatal(err)
			}
			if got := f.content("f.txt"); got != tt.after {
				t.Fatalf("file holds %q, want %q", got, tt.after)
			}
			if !strings.HasPrefix(text(res), "Successfully replaced text in f.txt at line ") || res.Details["startLine"] != tt.line {
				t.Fatalf("result %q, details %v", text(res), res.Details)
			}
		})
	}
}

func TestEditDiff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.file("code.go", numbered(12))
	res := f.mustCall("edit", map[string]any{"path": "code.go", "oldText": "line 6\nline 7\n", "newText": "six\nseven\nseven and a half\n"})
	want := `    ...
  3 line 3
  4 line 4
  5 line 5
- 6 line 6
- 7 line 7
+ 6 six
+ 7 seven
+ 8 seven and a half
  9 line 8
 10 line 9
 11 line 10
    ...`
	if got := res.Details["diff"]; got != want {
		t.Fatalf("diff\n%s\nwant\n%s", got, want)
	}
	if res.Details["firstChangedLine"] != int64(6) || res.Details["oldEndLine"] != int64(7) || res.Details["newEndLine"] != int64(8) {
		t.Fatalf("details %v", res.Details)
	}

	// A change inside one line shows the whole line; the unchanged part of
	// a widened span is context, not change.
	f.file("one.txt", "alpha\nbeta gamma\ndelta\n")
	res = f.mustCall("edit", map[string]any{"path": "one.txt", "oldText": "gamma\ndelta", "newText": "GAMMA\ndelta"})
	want = ` 1 alpha
-2 beta gamma
+2 beta GAMMA
 3 delta`
	if got := res.Details["diff"]; got != want {
		t.Fatalf("diff\n%s\nwant\n%s", got, want)
	}
}

func TestEditErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.MaxWriteBytes = 64 })
	f.file("f.txt", "foo bar foo\n")
	f.file("overlap.txt", "aaa\n")
	f.file("bin.dat", "a\x00b")
	f.file("big.txt", strings.Repeat("z", 65))
	f.file("near.txt", "start"+strings.Repeat("n", 55))
	f.file("dir/x", "")
	tests := []struct {
		path, oldText, newText string
		want                   []string
	}{
		{"f.txt", "baz", "x", []string{`could not find the exact text in "f.txt"`, "must match exactly"}},
		{"f.txt", "foo", "x", []string{`found 2 occurrences of the text in "f.txt"`, "unique"}},
		{"overlap.txt", "aa", "b", []string{"found 2 occurrences"}},
		{"f.txt", "bar", "bar", []string{`no changes made to "f.txt"`}},
		{"missing.txt", "a", "b", []string{`file not found: "missing.txt"`}},
		{"bin.dat", "a", "c", []string{`"bin.dat" looks like a binary file`}},
		{"big.txt", "z", "y", []string{`"big.txt" is 65B, over the 64B limit for edit`}},
		{"near.txt", "start", strings.Repeat("m", 11), []string{"would be 66B, over the 64B limit"}},
		{"dir", "a", "b", []string{`"dir" is a directory`}},
	}
	for _, tt := range tests {
		_, err := f.call("edit", map[string]any{"path": tt.path, "oldText": tt.oldText, "newText": tt.newText})
		wantErr(t, err, tt.want...)
	}
	if f.content("f.txt") != "foo bar foo\n" || f.content("overlap.txt") != "aaa\n" || f.content("near.txt") != "start"+strings.Repeat("n", 55) {
		t.Fatal("a failed edit changed a file")
	}
}

func TestEditKeepsMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := f.file("run.sh", "echo old\n")
	if err := os.Chmod(p, 0o750); err != nil {
		t.Fatal(err)
	}
	f.mustCall("edit", map[string]any{"path": filepath.Join(f.dir, "run.sh"), "oldText": "old", "newText": "new"})
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if f.content("run.sh") != "echo new\n" {
		t.Fatal("not edited")
	}
}

// TestLineDiffNeverPanics runs lineDiff over every placement of every
// small replacement in a few texts.
func TestLineDiffNeverPanics(t *testing.T) {
	t.Parallel()
	texts := []string{"", "a", "\n", "a\n", "a\nb", "a\r\nb\r\n", "\n\n\n", "ab\ncd\nef\n"}
	repls := []string{"", "x", "\n", "x\n", "\nx", "x\ny\n"}
	for _, c := range texts {
		for i := 0; i <= len(c); i++ {
			for j := i + 1; j <= len(c); j++ {
				for _, r := range repls {
					d := lineDiff(c, i, c[i:j], r)
					if d.firstChanged < 1 {
						t.Fatalf("lineDiff(%q, %d, %q, %q): first line %d", c, i, c[i:j], r, d.firstChanged)
					}
				}
			}
		}
	}
}
