package secretexec_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/secretexec"
)

// TestDecode: providers are declared under "secrets": {"providers": …}
// with OpenClaw's field names; defaults fill what is left out, and a
// declaration that is not a clean exec provider is refused, naming it.
func TestDecode(t *testing.T) {
	t.Parallel()
	got, err := secretexec.Decode([]byte(`{"profiles": {}, "secrets": {"providers": {
		"vault": {"source": "exec", "command": "/usr/local/bin/vault-secret", "args": ["--field", "value"], "passEnv": ["VAULT_ADDR"], "env": {"LANG": "C"}},
		"op": {"source": "exec", "command": "/usr/bin/op-secret", "timeoutMs": 2500, "maxOutputBytes": 4096, "jsonOnly": false, "refreshMs": 60000}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]secretexec.Provider{
		"vault": {Name: "vault", Command: "/usr/local/bin/vault-secret", Args: []string{"--field", "value"}, PassEnv: []string{"VAULT_ADDR"}, Env: map[string]string{"LANG": "C"},
			Timeout: secretexec.TimeoutDefault, MaxOutputBytes: secretexec.MaxOutputBytesDefault, JSONOnly: true, Refresh: secretexec.RefreshDefault},
		"op": {Name: "op", Command: "/usr/bin/op-secret", Timeout: 2500 * time.Millisecond, MaxOutputBytes: 4096, JSONOnly: false, Refresh: time.Minute},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got, err := secretexec.Decode([]byte(`{"profiles": {}}`)); err != nil || got != nil {
		t.Errorf("no secrets: %v, %v", got, err)
	}
	for _, tc := range []struct{ name, decl, want string }{
		{"a shell line as the command", `{"source": "exec", "command": "vault read secret/x"}`, `want the program's absolute path`},
		{"an unknown field", `{"source": "exec", "command": "/bin/x", "pass_env": ["A"]}`, `unknown field "pass_env"`},
		{"a file provider", `{"source": "file", "path": "/x"}`, `unknown field "path"`},
		{"an env provider", `{"source": "env"}`, `source "env": this worker declares exec providers only`},
		{"a bad variable name", `{"source": "exec", "command": "/bin/x", "passEnv": ["A B"]}`, `passEnv: "A B" is not a variable name`},
		{"too long a timeout", `{"source": "exec", "command": "/bin/x", "timeoutMs": 3600000}`, `timeoutMs: want 1 to 120000`},
		{"too much output", `{"source": "exec", "command": "/bin/x", "maxOutputBytes": 100000000}`, `maxOutputBytes: want 1 to 1048576`},
		{"too frequent a refresh", `{"source": "exec", "command": "/bin/x", "refreshMs": 10}`, `refreshMs: want at least 10000`},
		{"a NUL in an argument", `{"source": "exec", "command": "/bin/x", "args": ["a\u0000b"]}`, `args[0]`},
	} {
		_, err := secretexec.Decode([]byte(`{"secrets": {"providers": {"vault": ` + tc.decl + `}}}`))
		if err == nil || !strings.Contains(err.Error(), `secret provider "vault": `) || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, secretexec.ErrProvider) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := secretexec.Decode([]byte(`{"secrets": {"providers": {"Vault!": {"source": "exec", "command": "/bin/x"}}}}`)); err == nil || !strings.Contains(err.Error(), "a name is 1-64 lowercase") {
		t.Errorf("bad name: %v", err)
	}
}

// TestCheck: the command is resolved once, at start: a symlink is
// followed to the program that will run; a directory, a file that is not
// executable or that every user may write, and a missing file are
// refused, naming the path.
func TestCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	link := filepath.Join(dir, "link")
	plain := filepath.Join(dir, "plain")
	open := filepath.Join(dir, "open")
	for path, mode := range map[string]os.FileMode{prog: 0o700, plain: 0o600, open: 0o777} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	if err := os.Symlink(prog, link); err != nil {
		t.Fatal(err)
	}
	p, err := secretexec.Provider{Name: "vault", Command: link}.Check()
	if err != nil || p.Command != prog {
		t.Errorf("symlink: %q, %v", p.Command, err)
	}
	for path, want := range map[string]string{
		dir:                           "is not a regular file",
		plain:                         "is not executable",
		open:                          "is writable by every user",
		filepath.Join(dir, "missing"): "no such file",
	} {
		if _, err := (secretexec.Provider{Name: "vault", Command: path}).Check(); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	if _, err := secretexec.New(map[string]secretexec.Provider{}, map[string][]string{"vault": {"k"}}, nil); err == nil || !strings.Contains(err.Error(), `secret provider "vault" is not declared`) {
		t.Errorf("undeclared: %v", err)
	}
}

// TestProgramRunsDirectly: a declared program runs itself (here a script
// with its own interpreter line), with no shell in between: an argument
// that would be shell syntax arrives as it is. Not parallel: a program
// written while another test forks may be "text file busy".
func TestProgramRunsDirectly(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "vault-secret")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nprintf '{\"protocolVersion\":1,\"values\":{\"k\":\"%s\"}}' \"$1\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	p := secretexec.Provider{Name: "vault", Command: prog, Args: []string{"$(id);x"}, Timeout: time.Minute, MaxOutputBytes: 1024, JSONOnly: true, Refresh: time.Hour}
	v, err := secretexec.New(map[string]secretexec.Provider{"vault": p}, map[string][]string{"vault": {"k"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Secret("vault", "k"); got.Reveal() != "$(id);x" {
		t.Errorf("argument arrived as %q", got.Reveal())
	}
}
