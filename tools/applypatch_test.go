package tools

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree lists a directory's files (not directories) and their contents,
// relative to it.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			out[rel] = "-> " + target
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dirs lists a directory's subdirectories.
func dirs(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

const goFile = `package main

import "fmt"

func greet() {
	fmt.Println("Hi")
}

func main() {
	greet()
}
`

// TestApplyPatch: one patch adds, updates, moves and deletes files of a
// real tree; the files it does not name are untouched and an updated
// file keeps its mode.
func TestApplyPatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.file("src/app.go", goFile)
	f.file("obsolete.txt", "old\n")
	f.file("keep.txt", "keep\n")
	f.file("notes.md", "# Notes\n\n- one\n- two\n")
	if err := os.Chmod(filepath.Join(f.dir, "src/app.go"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := f.mustCall("apply_patch", map[string]any{"input": `*** Begin Patch
*** Add File: docs/hello.txt
+Hello
+world
*** Update File: src/app.go
*** Move to: cmd/main.go
@@ func greet() {
-	fmt.Println("Hi")
+	fmt.Println("Hello, world!")
 }
*** Update File: notes.md
@@
 - one
-- two
+- 2
+- three
*** Delete File: obsolete.txt
*** End Patch`})
	if got, want := text(res), "Success. Updated the following files:\nA docs/hello.txt\nM cmd/main.go\nM notes.md\nD obsolete.txt"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
	want := map[string]string{
		"docs/hello.txt": "Hello\nworld\n",
		"cmd/main.go":    strings.Replace(goFile, `"Hi"`, `"Hello, world!"`, 1),
		"notes.md":       "# Notes\n\n- one\n- 2\n- three\n",
		"keep.txt":       "keep\n",
	}
	if got := tree(t, f.dir); !mapsEqual(got, want) {
		t.Errorf("tree:\n%v\nwant\n%v", got, want)
	}
	if fi, err := os.Stat(filepath.Join(f.dir, "cmd/main.go")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("moved file mode %v, %v; want 0755 kept", fi.Mode(), err)
	}
	if !slices.Equal(res.Details["deleted"].([]any), []any{"obsolete.txt"}) {
		t.Errorf("details %v", res.Details)
	}
	f.checkOutside()
}

// TestApplyPatchAllOrNothing: a patch with a hunk that does not match, or
// a file it cannot touch, changes nothing — not even the operations
// before the bad one — and says which hunk failed and why.
func TestApplyPatchAllOrNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, patch string
		want        []string
	}{
		{"a hunk does not match", `*** Begin Patch
*** Add File: new/deep/file.txt
+new
*** Update File: a.txt
@@
-one
+ONE
*** Update File: b.txt
@@
 first
-not there
+x
*** End Patch`, []string{`"b.txt": hunk 1 (patch line 9): these lines (context and '-' lines) were not found in the file at or after line 1:`, "  not there", "nothing was changed"}},
		{"a context line not found", "*** Begin Patch\n*** Update File: a.txt\n@@ func nope()\n-one\n+1\n*** End Patch",
			[]string{`the @@ context line "func nope()" was not found`}},
		{"updating a missing file", "*** Begin Patch\n*** Delete File: a.txt\n*** Update File: gone.txt\n@@\n-x\n+y\n*** End Patch",
			[]string{`cannot update "gone.txt" (patch line 3): file not found; use *** Add File: to create a file`}},
		{"deleting a missing file", "*** Begin Patch\n*** Add File: x.txt\n+x\n*** Delete File: nope.txt\n*** End Patch", []string{`cannot delete "nope.txt"`}},
		{"escaping the workspace", "*** Begin Patch\n*** Add File: x.txt\n+x\n*** Add File: ../outside/evil.txt\n+x\n*** End Patch", []string{`escapes the workspace`}},
		{"through a symbolic link out", "*** Begin Patch\n*** Add File: x.txt\n+x\n*** Add File: out/evil.txt\n+x\n*** End Patch", []string{"outside the workspace"}},
		{"a symbolic link itself", "*** Begin Patch\n*** Update File: link.txt\n@@\n-one\n+1\n*** End Patch", []string{"is a symbolic link"}},
		{"a directory", "*** Begin Patch\n*** Add File: x.txt\n+x\n*** Delete File: sub\n*** End Patch", []string{`"sub" is a directory`}},
		{"an absolute path outside", "*** Begin Patch\n*** Add File: /etc/evil\n+x\n*** End Patch", []string{"outside the workspace"}},
		{"a parse error", "*** Begin Patch\n*** Add File: x.txt\n+x\nstray\n*** End Patch", []string{"invalid patch at line 4", "nothing was changed"}},
		{"a unified diff", "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+1\n", []string{`the first line must be "*** Begin Patch"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.file("a.txt", "one\ntwo\n")
			f.file("b.txt", "first\nsecond\n")
			f.file("sub/c.txt", "c\n")
			f.symlink("a.txt", "link.txt")
			f.symlink("../outside", "out")
			before, beforeDirs := tree(t, f.dir), dirs(t, f.dir)
			_, err := f.call("apply_patch", map[string]any{"input": tc.patch})
			wantErr(t, err, tc.want...)
			if after := tree(t, f.dir); !mapsEqual(after, before) {
				t.Errorf("the tree changed:\n%v\nwas\n%v", after, before)
			}
			if after := dirs(t, f.dir); !slices.Equal(after, beforeDirs) {
				t.Errorf("directories %v, were %v", after, beforeDirs)
			}
			f.checkOutside()
		})
	}
}

// TestApplyPatchRollback: a failure while swapping the files in (the
// third rename fails) puts back what was swapped already and removes the
// staged files and the directories made for them.
func TestApplyPatchRollback(t *testing.T) {
	t.Parallel()
	for fail := 1; fail <= 4; fail++ {
		f := newFixture(t)
		f.file("a.txt", "one\n")
		f.file("b.txt", "two\n")
		before := tree(t, f.dir)
		tool, _ := f.tools.Lookup("apply_patch")
		ap := tool.(*applyPatchTool)
		n := 0
		ap.rename = func(r *os.Root, from, to string) error {
			if n++; n == fail {
				return errors.New("disk on fire")
			}
			return r.Rename(from, to)
		}
		_, err := f.call("apply_patch", map[string]any{"input": "*** Begin Patch\n*** Update File: a.txt\n-one\n+ONE\n*** Add File: new/b2.txt\n+x\n*** Delete File: b.txt\n*** End Patch"})
		wantErr(t, err, "disk on fire", "nothing was changed")
		if after := tree(t, f.dir); !mapsEqual(after, before) {
			t.Errorf("rename %d failing: the tree is\n%v\nwas\n%v", fail, after, before)
		}
		if d := dirs(t, f.dir); len(d) != 0 {
			t.Errorf("rename %d failing: directories left: %v", fail, d)
		}
	}
}

// TestApplyPatchArgs: what the model gets wrong about the call itself.
func TestApplyPatchArgs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.MaxWriteBytes = 64 })
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, `missing required argument "input"`},
		{map[string]any{"input": 3}, `argument "input" must be a string`},
		{map[string]any{"input": "  \n"}, "input is empty"},
		{map[string]any{"input": strings.Repeat("x", 65)}, "over the 64B limit"},
	} {
		_, err := f.call("apply_patch", tc.args)
		wantErr(t, err, tc.want)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
