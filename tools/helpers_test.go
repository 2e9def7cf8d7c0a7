package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sandbox"
)

// fixture is a workspace in a temp dir, next to an "outside" directory
// holding a secret that no file tool may reach.
type fixture struct {
	t       *testing.T
	dir     string // the workspace
	outside string // a sibling directory outside the workspace
	tools   List
}

const secret = "TOP-SECRET-OUTSIDE"

// newFixture builds the file tools and exec, confined where the platform
// allows.
func newFixture(t *testing.T, tweak ...func(*Workspace)) *fixture {
	t.Helper()
	return newFixtureBox(t, defaultBox(t), tweak...)
}

// newFixtureBox is newFixture with exec run by box.
func newFixtureBox(t *testing.T, box *sandbox.Sandbox, tweak ...func(*Workspace)) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{t: t, dir: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{f.dir, f.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.outside, "secret.txt"), []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := Workspace{Dir: f.dir, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}}
	for _, fn := range tweak {
		fn(&w)
	}
	var err error
	if f.tools, err = Builtin(w); err != nil {
		t.Fatal(err)
	}
	ex, err := Exec(w, box)
	if err != nil {
		t.Fatal(err)
	}
	f.tools = append(f.tools, ex)
	return f
}

// file writes a file in the workspace.
func (f *fixture) file(name, content string) string {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// symlink creates link (in the workspace) pointing at target.
func (f *fixture) symlink(target, link string) {
	f.t.Helper()
	p := filepath.Join(f.dir, link)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
}

// content reads a workspace file.
func (f *fixture) content(name string) string {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, name))
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

// call runs tool name with args, turning a panic into a test failure.
func (f *fixture) call(name string, args map[string]any) (Result, error) {
	return f.callCtx(context.Background(), name, args)
}

func (f *fixture) callCtx(ctx context.Context, name string, args map[string]any) (res Result, err error) {
	f.t.Helper()
	tool, ok := f.tools.Lookup(name)
	if !ok {
		f.t.Fatalf("no tool %q", name)
	}
	defer func() {
		if r := recover(); r != nil {
			f.t.Fatalf("%s(%v) panicked: %v", name, args, r)
		}
	}()
	return tool.Call(ctx, Call{ID: "call_1", Name: name, Args: args})
}

// mustCall fails the test on an error.
func (f *fixture) mustCall(name string, args map[string]any) Result {
	f.t.Helper()
	res, err := f.call(name, args)
	if err != nil {
		f.t.Fatalf("%s(%v): %v", name, args, err)
	}
	return res
}

// checkOutside fails if the secret outside the workspace changed or a file
// appeared next to it.
func (f *fixture) checkOutside() {
	f.t.Helper()
	entries, err := os.ReadDir(f.outside)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		f.t.Fatalf("outside directory changed: %v", names)
	}
	b, err := os.ReadFile(filepath.Join(f.outside, "secret.txt"))
	if err != nil || string(b) != secret+"\n" {
		f.t.Fatalf("outside secret changed: %q, %v", b, err)
	}
}

// text joins the text blocks of a result.
func text(r Result) string {
	var parts []string
	for _, b := range r.Content {
		if b.Type == message.BlockText {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error containing %q, got none", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not contain %q", err, s)
		}
	}
}
