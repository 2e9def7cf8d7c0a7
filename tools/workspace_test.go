package tools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBuiltinValidation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		ws   Workspace
		want string // error substring; "" for success
	}{
		{"ok", Workspace{Dir: dir}, ""},
		{"ok unclean", Workspace{Dir: dir + "/./"}, ""},
		{"no dir", Workspace{}, "Dir is required"},
		{"relative", Workspace{Dir: "ws"}, "not absolute"},
		{"missing", Workspace{Dir: filepath.Join(dir, "nope")}, "no such file"},
		{"file", Workspace{Dir: file}, "not a directory"},
		{"relative shell", Workspace{Dir: dir, Shell: "sh"}, "Shell"},
		{"negative timeout", Workspace{Dir: dir, ExecTimeout: -time.Second}, "ExecTimeout is negative"},
		{"negative cap", Workspace{Dir: dir, MaxWriteBytes: -1}, "MaxWriteBytes is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := Builtin(tt.ws)
			if tt.want != "" {
				wantErr(t, err, tt.want)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range l.Specs() {
				names = append(names, s.Name)
				if s.Description == "" || s.Parameters["type"] != "object" {
					t.Errorf("%s: incomplete spec %+v", s.Name, s)
				}
				if _, err := json.Marshal(s); err != nil {
					t.Errorf("%s: spec does not marshal: %v", s.Name, err)
				}
			}
			if got := strings.Join(names, ","); got != "read,write,edit,apply_patch" {
				t.Fatalf("tools = %s", got)
			}
		})
	}
}

func TestExecValidation(t *testing.T) {
	t.Parallel()
	if _, err := Exec(Workspace{Dir: t.TempDir()}, nil); err == nil || !strings.Contains(err.Error(), "sandbox") {
		t.Fatalf("Exec without a sandbox: %v", err)
	}
	_, err := Exec(Workspace{Dir: "relative"}, defaultBox(t))
	wantErr(t, err, "not absolute")
	tool, err := Exec(Workspace{Dir: t.TempDir()}, defaultBox(t))
	if err != nil || tool.Spec().Name != "exec" {
		t.Fatalf("%v %v", tool, err)
	}
}

func TestWorkspaceDefaults(t *testing.T) {
	t.Parallel()
	v, err := Workspace{Dir: t.TempDir(), ExecTimeout: time.Hour}.validate()
	if err != nil {
		t.Fatal(err)
	}
	if v.Shell != DefaultShell || v.MaxExecTimeout != DefaultMaxExecTimeout || v.ExecTimeout != DefaultMaxExecTimeout ||
		v.MaxReadLines != DefaultMaxReadLines || v.MaxReadBytes != DefaultMaxReadBytes || v.MaxWriteBytes != DefaultMaxWriteBytes ||
		v.MaxOutputBytes != DefaultMaxOutputBytes || v.MaxImageBytes != DefaultMaxImageBytes {
		t.Fatalf("defaults not applied: %+v", v.Workspace)
	}
	if v.Env == nil || len(v.Env) != 0 {
		t.Fatalf("nil Env must become an empty environment, got %#v", v.Env)
	}
}

// TestBuiltinCopiesEnv: changing the caller's slice later must not change
// the environment of commands.
func TestBuiltinCopiesEnv(t *testing.T) {
	t.Parallel()
	env := []string{"A=1"}
	l, err := Builtin(Workspace{Dir: t.TempDir(), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	tool, err := Exec(Workspace{Dir: t.TempDir(), Env: env}, defaultBox(t))
	if err != nil {
		t.Fatal(err)
	}
	env[0] = "A=2"
	if _, ok := l.Lookup("exec"); ok {
		t.Fatal("Builtin offers exec")
	}
	res, err := tool.Call(t.Context(), Call{Args: map[string]any{"command": "echo $A"}})
	if err != nil || !strings.HasPrefix(text(res), "1\n") {
		t.Fatalf("got %q, %v", text(res), err)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The workspace is also reachable through a symlink; either spelling
	// of an absolute path inside it is accepted.
	alias := filepath.Join(base, "alias")
	if err := os.Symlink(dir, alias); err != nil {
		t.Fatal(err)
	}
	w, err := Workspace{Dir: alias}.validate()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in, want, err string
	}{
		{in: "a.txt", want: "a.txt"},
		{in: "./a/../b/c.go", want: "b/c.go"},
		{in: "a//b/", want: "a/b"},
		{in: ".", want: "."},
		{in: "a/..", want: "."},
		{in: "..a", want: "..a"},
		{in: "a/..b", want: "a/..b"},
		{in: " spaced name ", want: " spaced name "},
		{in: alias, want: "."},
		{in: alias + "/x/y", want: "x/y"},
		{in: dir + "/x", want: "x"},
		{in: alias + "/x/../../ws/y", want: "y"}, // lexically base/ws/y: inside
		{in: alias + "/../outside", err: "outside the workspace"},
		{in: "", err: "path is empty"},
		{in: "..", err: "escapes the workspace"},
		{in: "../outside/secret.txt", err: `"../outside/secret.txt" escapes`},
		{in: "a/../../b", err: "escapes"},
		{in: "/etc/passwd", err: `"/etc/passwd" is outside the workspace`},
		{in: base, err: "outside"},
		{in: alias + "x", err: "outside"},
		{in: "~", err: "home directory"},
		{in: "~/x", err: "home directory"},
		{in: "a\x00b", err: "NUL byte"},
	}
	for _, tt := range tests {
		got, err := w.resolve(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("resolve(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("resolve(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestConfinement runs every file tool against every way out of the
// workspace: each is refused with an error naming the path, and nothing
// outside is read or changed.
func TestConfinement(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.file("in/ok.txt", "inside\n")
	f.symlink(filepath.Join(f.outside, "secret.txt"), "abs-link") // absolute, outside
	f.symlink("../outside/secret.txt", "rel-link")                // relative, outside
	f.symlink("../../outside", "in/dir-link")                     // directory, outside
	f.symlink(filepath.Join(f.outside, "new.txt"), "dangling")    // to a file that would be created outside
	f.symlink("in/ok.txt", "good-link")                           // relative, inside: allowed
	f.symlink(filepath.Join(f.dir, "in", "ok.txt"), "abs-inside") // absolute, inside: os.Root refuses absolute links
	f.symlink("loop-b", "loop-a")                                 // a loop
	f.symlink("loop-a", "loop-b")                                 //
	f.symlink("../ws/../outside/secret.txt", "in/../sneaky")      // climbs out through the workspace's own name
	paths := []struct{ path, want string }{
		{"abs-link", "resolves outside the workspace"},
		{"rel-link", "resolves outside the workspace"},
		{"in/dir-link/secret.txt", "resolves outside the workspace"},
		{"in/dir-link/new.txt", "resolves outside the workspace"},
		{"dangling", "resolves outside the workspace"},
		{"abs-inside", "resolves outside the workspace"},
		{"sneaky", "resolves outside the workspace"},
		{"loop-a", "symbolic links"},
		{"../outside/secret.txt", "escapes the workspace"},
		{filepath.Join(f.outside, "secret.txt"), "is outside the workspace"},
		{filepath.Join(f.outside, "new.txt"), "is outside the workspace"},
	}
	for _, p := range paths {
		for _, call := range []struct {
			tool string
			args map[string]any
		}{
			{"read", map[string]any{"path": p.path}},
			{"write", map[string]any{"path": p.path, "content": "pwned"}},
			{"edit", map[string]any{"path": p.path, "oldText": secret, "newText": "pwned"}},
		} {
			res, err := f.call(call.tool, call.args)
			if err == nil {
				t.Errorf("%s %q: no error, got %q", call.tool, p.path, text(res))
				continue
			}
			if !strings.Contains(err.Error(), p.want) || !strings.Contains(err.Error(), p.path) {
				t.Errorf("%s %q: error %q, want it to contain %q and the path", call.tool, p.path, err, p.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s %q: error leaks the secret", call.tool, p.path)
			}
			f.checkOutside()
		}
	}
	// A symlink that stays inside works for all three.
	if got := text(f.mustCall("read", map[string]any{"path": "good-link"})); got != "inside" {
		t.Fatalf("read through inside link = %q", got)
	}
	f.mustCall("edit", map[string]any{"path": "good-link", "oldText": "inside", "newText": "edited"})
	f.mustCall("write", map[string]any{"path": "good-link", "content": "written\n"})
	if got := f.content("in/ok.txt"); got != "written\n" {
		t.Fatalf("write through inside link: target holds %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(f.dir, "good-link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link itself was replaced: %v %v", fi, err)
	}
}

// TestHostileArgs feeds every tool arguments of the wrong shape: each is
// an error that names the argument, never a panic.
func TestHostileArgs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.file("a.txt", "a\n")
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"read", nil, `missing required argument "path"`},
		{"read", map[string]any{"path": nil}, `missing required argument "path"`},
		{"read", map[string]any{"path": 42.0}, `"path" must be a string, got number`},
		{"read", map[string]any{"path": []any{"a.txt"}}, `"path" must be a string, got array`},
		{"read", map[string]any{"path": map[string]any{}}, "got object"},
		{"read", map[string]any{"path": true}, "got boolean"},
		{"read", map[string]any{"path": "a.txt", "offset": "two"}, `"offset" must be a number, got the string "two"`},
		{"read", map[string]any{"path": "a.txt", "offset": 1.5}, "whole number"},
		{"read", map[string]any{"path": "a.txt", "offset": []any{1}}, "got array"},
		{"read", map[string]any{"path": "a.txt", "limit": "NaN"}, "finite"},
		{"read", map[string]any{"path": "a.txt", "limit": 0}, "limit must be 1 or more"},
		{"read", map[string]any{"path": "a.txt", "offset": -3}, "offset must be a line number"},
		{"read", map[string]any{"path": "a\x00.txt"}, "NUL byte"},
		{"write", nil, `missing required argument "path"`},
		{"write", map[string]any{"path": "b.txt"}, `missing required argument "content"`},
		{"write", map[string]any{"path": "b.txt", "content": 12}, `"content" must be a string, got number`},
		{"write", map[string]any{"path": "", "content": "x"}, "path is empty"},
		{"edit", map[string]any{"path": "a.txt", "oldText": "a"}, `missing required argument "newText"`},
		{"edit", map[string]any{"path": "a.txt", "oldText": []any{"a"}, "newText": "b"}, `"oldText" must be a string`},
		{"edit", map[string]any{"path": "a.txt", "oldText": "", "newText": "b"}, "oldText is empty"},
		{"exec", nil, `missing required argument "command"`},
		{"exec", map[string]any{"command": 7}, `"command" must be a string`},
		{"exec", map[string]any{"command": "  "}, "command is empty"},
		{"exec", map[string]any{"command": "echo \x00"}, "NUL byte"},
		{"exec", map[string]any{"command": "true", "timeout": "soon"}, `"timeout" must be a number`},
		{"exec", map[string]any{"command": "true", "timeout": -1}, "timeout must be a positive number"},
		{"exec", map[string]any{"command": "true", "timeout": 0}, "timeout must be a positive number"},
		{"exec", map[string]any{"command": "true", "timeout": map[string]any{"s": 1}}, "got object"},
	}
	for _, tt := range tests {
		_, err := f.call(tt.tool, tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s(%v): error %v, want %q", tt.tool, tt.args, err, tt.want)
		}
	}
}

// TestLenientNumbers: numbers as strings, int types and json.Number are
// all accepted.
func TestLenientNumbers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.file("n.txt", "1\n2\n3\n4\n5\n")
	for _, off := range []any{"2", " 2 ", 2, int64(2), uint8(2), float32(2), 2.0, json.Number("2")} {
		res, err := f.call("read", map[string]any{"path": "n.txt", "offset": off, "limit": "1"})
		if err != nil || !strings.HasPrefix(text(res), "2\n\n[3 more lines") {
			t.Errorf("offset %T(%v): %q, %v", off, off, text(res), err)
		}
	}
}
