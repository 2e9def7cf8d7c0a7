package patch

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestParse: the operations of the format, with the reference's leniency.
func TestParse(t *testing.T) {
	t.Parallel()
	full := `*** Begin Patch
*** Add File: hello.txt
+Hello
+world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-print("Hi")
+print("Hello, world!")
@@
 a

-b
+c
*** End of File
*** Delete File: obsolete.txt
*** End Patch`
	want := []Op{
		{Kind: Add, Path: "hello.txt", Contents: "Hello\nworld\n", Line: 2},
		{Kind: Update, Path: "src/app.py", MoveTo: "src/main.py", Line: 5, Chunks: []Chunk{
			{Context: "def greet():", Old: []string{`print("Hi")`}, New: []string{`print("Hello, world!")`}, Line: 7},
			{Old: []string{"a", "", "b"}, New: []string{"a", "", "c"}, EOF: true, Line: 10},
		}},
		{Kind: Delete, Path: "obsolete.txt", Line: 16},
	}
	for name, in := range map[string]string{
		"plain":      full,
		"crlf":       strings.ReplaceAll(full, "\n", "\r\n"),
		"whitespace": "\n  " + full + "\n\n",
		"heredoc":    "<<'EOF'\n" + full + "\nEOF",
	} {
		got, err := Parse(in)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if name == "heredoc" {
			for i := range want { // one line further down
				got[i].Line--
				for j := range got[i].Chunks {
					got[i].Chunks[j].Line--
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n%+v\nwant\n%+v", name, got, want)
		}
	}
	// The first hunk may omit its @@ line.
	ops, err := Parse("*** Begin Patch\n*** Update File: a\n-x\n+y\n*** End Patch")
	if err != nil || len(ops[0].Chunks) != 1 || ops[0].Chunks[0].Old[0] != "x" {
		t.Fatalf("%+v, %v", ops, err)
	}
}

// TestParseErrors: what a model gets wrong, named by line.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", "line 1: the first line must be \"*** Begin Patch\""},
		{"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b", "line 1: the first line must be"},
		{"*** Begin Patch\n*** Add File: a\n+x", "line 3: the last line must be \"*** End Patch\""},
		{"*** Begin Patch\n*** End Patch", "no file operations"},
		{"*** Begin Patch\n*** Frob File: a\n*** End Patch", "line 2: \"*** Frob File: a\" is not a file operation"},
		{"*** Begin Patch\n*** Update File: a\n*** End Patch", "line 2: *** Update File: a has no hunks"},
		{"*** Begin Patch\n*** Update File: a\n@@\n x\nbad\n*** End Patch", "line 5: expected a hunk starting with @@"},
		{"*** Begin Patch\n*** Update File: a\n@@\nbad\n*** End Patch", "line 4: unexpected line \"bad\" in a hunk"},
		{"*** Begin Patch\n*** Update File: a\n@@\n*** End of File\n*** End Patch", "line 4: a hunk with no lines before"},
		{"*** Begin Patch\n*** Update File: a\n*** Move to: \n@@\n-x\n*** End Patch", "*** Move to: without a path"},
		{"*** Begin Patch\n*** Delete File: \n*** End Patch", "without a path"},
	} {
		_, err := Parse(tc.in)
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a ParseError with %q", tc.in, err, tc.want)
		}
	}
}

// TestApply: hunks found exactly, then ever more loosely, in order.
func TestApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file string
		chunks     []Chunk
		want       string
	}{
		{"replace", "a\nb\nc\n", []Chunk{{Old: []string{"a", "b"}, New: []string{"a", "B"}}}, "a\nB\nc\n"},
		{"context line first", "x\nfunc f() {\n\treturn 1\n}\nfunc g() {\n\treturn 1\n}\n",
			[]Chunk{{Context: "func g() {", Old: []string{"\treturn 1"}, New: []string{"\treturn 2"}}},
			"x\nfunc f() {\n\treturn 1\n}\nfunc g() {\n\treturn 2\n}\n"},
		{"two hunks in order", "1\n2\n1\n2\n", []Chunk{{Old: []string{"2"}, New: []string{"two"}}, {Old: []string{"2"}, New: []string{"TWO"}}}, "1\ntwo\n1\nTWO\n"},
		{"end of file", "a\nz\na\nz\n", []Chunk{{Old: []string{"a", "z"}, New: []string{"a", "end"}, EOF: true}}, "a\nz\na\nend\n"},
		{"pure addition at the end", "a\n", []Chunk{{New: []string{"b"}}}, "a\nb\n"},
		{"trailing whitespace ignored", "a  \nb\n", []Chunk{{Old: []string{"a", "b"}, New: []string{"c"}}}, "c\n"},
		{"indentation ignored last", "    a\n", []Chunk{{Old: []string{"a"}, New: []string{"    A"}}}, "    A\n"},
		{"typographic quotes", "say(\u201chi\u201d) \u2014 ok\n", []Chunk{{Old: []string{`say("hi") - ok`}, New: []string{"x"}}}, "x\n"},
		{"CRLF kept", "a\r\nb\r\n", []Chunk{{Old: []string{"b"}, New: []string{"c"}}}, "a\r\nc\r\n"},
		{"no final newline gets one", "a\nb", []Chunk{{Old: []string{"a"}, New: []string{"A"}}}, "A\nb\n"},
		{"a trailing empty old line dropped", "a\nb\n", []Chunk{{Old: []string{"b", ""}, New: []string{"c", ""}}}, "a\nc\n"},
		{"delete lines", "a\nb\nc\n", []Chunk{{Old: []string{"a", "b"}, New: []string{"a"}}}, "a\nc\n"},
	} {
		got, err := Apply(tc.file, tc.chunks)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// TestApplyErrors: a hunk that does not match says which and what.
func TestApplyErrors(t *testing.T) {
	t.Parallel()
	_, err := Apply("a\nb\n", []Chunk{{Old: []string{"a"}, New: []string{"A"}, Line: 3}, {Old: []string{"zzz"}, New: nil, Line: 6}})
	var he *HunkError
	if !errors.As(err, &he) || he.Hunk != 2 || !strings.Contains(err.Error(), "hunk 2 (patch line 6): these lines (context and '-' lines) were not found in the file at or after line 2:\n  zzz") {
		t.Errorf("%v", err)
	}
	_, err = Apply("a\n", []Chunk{{Context: "func nope()", Old: []string{"a"}, Line: 4}})
	if !errors.As(err, &he) || !strings.Contains(err.Error(), `the @@ context line "func nope()" was not found`) {
		t.Errorf("%v", err)
	}
	// The second hunk is searched after the first: "a" is behind it.
	if _, err := Apply("a\nb\n", []Chunk{{Old: []string{"b"}}, {Old: []string{"a"}}}); !errors.As(err, &he) {
		t.Errorf("out-of-order hunks applied: %v", err)
	}
}

// FuzzParse: any text parses or fails with a ParseError, never panics;
// parsed updates apply to any content or fail with a HunkError.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"*** Begin Patch\n*** Add File: a\n+x\n*** End Patch",
		"*** Begin Patch\n*** Update File: a\n*** Move to: b\n@@ ctx\n x\n-y\n+z\n*** End of File\n*** End Patch",
		"<<'EOF'\n*** Begin Patch\n*** Delete File: a\n*** End Patch\nEOF",
		"*** Begin Patch\n*** Update File: a\n-x\n\n+y\n@@\n+w\n*** End Patch",
		"*** Begin Patch\r\n*** Update File: a\r\n@@\r\n*** End of File\r\n*** End Patch",
		"*** Begin Patch\n*** Update File: a\n@@\n-\n*** End Patch",
	} {
		f.Add(s, "x\ny\nctx\nx\ny\n")
	}
	f.Fuzz(func(t *testing.T, text, file string) {
		ops, err := Parse(text)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a ParseError", err)
			}
			return
		}
		for _, op := range ops {
			if op.Path == "" || op.Kind < Add || op.Kind > Update {
				t.Fatalf("bad op %+v", op)
			}
			if op.Kind != Update {
				continue
			}
			out, err := Apply(file, op.Chunks)
			if err != nil {
				var he *HunkError
				if !errors.As(err, &he) && !strings.Contains(err.Error(), "overlapping") {
					t.Fatalf("apply error %v", err)
				}
				continue
			}
			if !strings.HasSuffix(out, "\n") {
				t.Fatalf("result %q without a final newline", out)
			}
		}
	})
}
