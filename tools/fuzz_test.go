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
