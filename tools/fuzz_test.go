package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var fuzzPaths = []string{
	"a.txt", ".", "..", "../outside/secret.txt", "a/../../b", "/etc/passwd", "~", "~/x",
	"a\x00b", "", "abs-link", "rel-link", "in/dir-link/secret.txt", "//", "./../ws/a.txt",
	"in/../../ws/../outside/secret.txt", "\\..\\x", "a/./b/../../..", "…/x",
}

// FuzzResolve: resolve never panics, and whatever it accepts is a clean
// relative name that stays inside the workspace, lexically.
func FuzzResolve(f *testing.F) {
	base := f.TempDir()
	dir := filepath.Join(base, "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	w, err := Workspace{Dir: dir}.validate()
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range fuzzPaths {
		f.Add(p)
	}
	f.Add(dir + "/x/../y")
	f.Add(dir + "/../ws2")
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := w.resolve(p)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if rel == "" || filepath.IsAbs(rel) || filepath.Clean(rel) != rel || escapes(rel) {
			t.Fatalf("resolve(%q) = %q", p, rel)
		}
		if strings.IndexByte(rel, 0) >= 0 {
			t.Fatalf("resolve(%q) kept a NUL byte", p)
		}
		full := filepath.Join(dir, rel)
		if full != dir && !strings.HasPrefix(full, dir+string(filepath.Separator)) {
			t.Fatalf("resolve(%q) = %q leads to %q, outside %q", p, rel, full, dir)
		}
	})
}

// FuzzConfined calls read, write, edit and apply_patch with arbitrary paths in a
// workspace full of symlinks leading out: the secret next to the workspace
// is never shown, changed or joined by a new file, and nothing panics.
func FuzzConfined(f *testing.F) {
	for _, p := range fuzzPaths {
		f.Add(p)
	}
	f.Add("dangling")
	f.Add("in/dir-link/new.txt")
	f.Fuzz(func(t *testing.T, p string) {
		fx := newFixture(t)
		fx.file("a.txt", "alpha\n")
		fx.file("in/b.txt", "beta\n")
		fx.symlink(filepath.Join(fx.outside, "secret.txt"), "abs-link")
		fx.symlink("../outside/secret.txt", "rel-link")
		fx.symlink("../../outside", "in/dir-link")
		fx.symlink(filepath.Join(fx.outside, "new.txt"), "dangling")
		fx.symlink("../ws/../outside/secret.txt", "sneaky")
		res, err := fx.call("read", map[string]any{"path": p})
		if strings.Contains(text(res), secret) || err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("read %q showed the secret", p)
		}
		fx.call("write", map[string]any{"path": p, "content": "pwned"})                         //nolint:errcheck
		fx.call("edit", map[string]any{"path": p, "oldText": "TOP", "newText": "pwned"})        //nolint:errcheck
		fx.call("edit", map[string]any{"path": p, "oldText": "pwned", "newText": secret + "!"}) //nolint:errcheck
		for _, op := range []string{"*** Add File: " + p + "\n+pwned", "*** Delete File: " + p, "*** Update File: " + p + "\n@@\n-" + secret + "\n+pwned",
			"*** Update File: a.txt\n*** Move to: " + p + "\n@@\n-alpha\n+pwned"} {
			fx.call("apply_patch", map[string]any{"input": "*** Begin Patch\n" + op + "\n*** End Patch"}) //nolint:errcheck
		}
		fx.checkOutside()
	})
}

// FuzzMemoryGetPath: memory_get with any path reads only memory files
// inside the workspace: never the secret next to it (through .., an
// absolute path or a symbolic link), never another workspace file.
func FuzzMemoryGetPath(f *testing.F) {
	for _, p := range append(fuzzPaths, "MEMORY.md", "memory/a.md", "memory/../notes.md", "memory/link.md", "MEMORY.md/..") {
		f.Add(p)
	}
	base := f.TempDir()
	dir, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for name, content := range map[string]string{"ws/MEMORY.md": "memory\n", "ws/notes.md": "NOT-MEMORY\n", "ws/memory/a.md": "a\n", "outside/secret.txt": secret + "\n"} {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(dir, "memory", "link.md")); err != nil {
		f.Fatal(err)
	}
	mem, err := Memory(Workspace{Dir: dir}, nil)
	if err != nil {
		f.Fatal(err)
	}
	get, _ := mem.Lookup("memory_get")
	f.Fuzz(func(t *testing.T, p string) {
		res, err := get.Call(t.Context(), Call{Args: map[string]any{"path": p}})
		if err != nil {
			return
		}
		text := res.Content[0].Text
		if strings.Contains(text, secret) || strings.Contains(text, "NOT-MEMORY") {
			t.Fatalf("memory_get(%q) read %q", p, text)
		}
	})
}

// FuzzProcessArgs: the process tool's actions other than start, with any
// action and sessionId, answer or refuse without a panic and never reach
// another session's process.
func FuzzProcessArgs(f *testing.F) {
	f.Add("poll", "p1@w1")
	f.Add("kill", "p1@w1")
	f.Add("log", "p1")
	f.Add("remove", "@")
	f.Add("write", "p1@w1@w2")
	_, unconfined := boxes(f)
	ps, err := NewProcesses(ProcessConfig{Box: unconfined, Worker: "w1"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(ps.Close)
	dir := f.TempDir()
	owner, _ := ps.Tool(Workspace{Dir: dir}, "owner")
	if _, err := owner.Call(f.Context(), Call{Args: map[string]any{"action": "start", "command": "sleep 600"}}); err != nil {
		f.Fatal(err)
	}
	other, _ := ps.Tool(Workspace{Dir: dir}, "other")
	f.Fuzz(func(t *testing.T, action, id string) {
		if action == "start" {
			return
		}
		_, err := other.Call(t.Context(), Call{Args: map[string]any{"action": action, "sessionId": id, "data": "x"}})
		if err == nil && action != "list" {
			t.Fatalf("%s %q reached another session's process", action, id)
		}
	})
}
