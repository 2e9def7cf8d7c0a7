package secretexec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/secretexec"
)

// script is a provider "vault" that runs body with /bin/sh (a real file,
// a real process), with generous bounds unless the test changes them.
func script(t *testing.T, body string) secretexec.Provider {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vault.sh")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return secretexec.Provider{Name: "vault", Command: "/bin/sh", Args: []string{path}, Timeout: time.Minute,
		MaxOutputBytes: secretexec.MaxOutputBytesDefault, JSONOnly: true, Refresh: time.Hour}
}

// load prepares p for ids and runs it once.
func load(t *testing.T, p secretexec.Provider, env func(string) string, ids ...string) (*secretexec.Values, error) {
	t.Helper()
	v, err := secretexec.New(map[string]secretexec.Provider{p.Name: p}, map[string][]string{p.Name: ids}, env)
	if err != nil {
		t.Fatal(err)
	}
	return v, v.Load(t.Context())
}

// TestValues: what a provider returns, by the JSON protocol or as a plain
// value, is each id's secret, trimmed; the request on stdin names the
// provider and every id at once.
func TestValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		plain      bool
		ids        []string
		want       map[string]string
	}{
		{"protocol, one run for every id", `req=$(cat)
case "$req" in
'{"protocolVersion":1,"provider":"vault","ids":["a/b","c:d"]}') printf '{"protocolVersion":1,"values":{"a/b":"sk-exec-a\\n","c:d":"sk-exec-c"}}\n' ;;
*) exit 9 ;;
esac`, false, []string{"c:d", "a/b", "c:d"}, map[string]string{"a/b": "sk-exec-a", "c:d": "sk-exec-c"}},
		{"plain value, trailing newline trimmed", `printf 'sk-plain-value\n'`, true, []string{"k"}, map[string]string{"k": "sk-plain-value"}},
		{"plain, one run per id", `req=$(cat)
case "$req" in
*'"ids":["a"]'*) echo sk-plain-a ;;
*'"ids":["b"]'*) echo sk-plain-b ;;
esac`, true, []string{"a", "b"}, map[string]string{"a": "sk-plain-a", "b": "sk-plain-b"}},
		{"a protocol answer where plain is allowed", `printf '{"protocolVersion":1,"values":{"k":"sk-json"}}'`, true, []string{"k"}, map[string]string{"k": "sk-json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := script(t, tc.body)
			p.JSONOnly = !tc.plain
			v, err := load(t, p, nil, tc.ids...)
			if err != nil {
				t.Fatal(err)
			}
			for id, want := range tc.want {
				if got, err := v.Secret("vault", id); err != nil || got.Reveal() != want {
					t.Errorf("%s: %v", id, err)
				}
			}
		})
	}
}

// TestRunFailures: every way a run fails says which provider and how
// (status, bound, protocol), and never what the command printed on
// stdout or stderr.
func TestRunFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		change     func(*secretexec.Provider)
		want       string
	}{
		{"non-zero exit", "echo sk-leaked-out; echo sk-leaked-err >&2; exit 3", nil,
			`secret provider "vault": exited with status 3 (14 bytes on stderr, not shown: run the command by hand to see them)`},
		{"killed by a signal", "kill -9 $$", nil, `secret provider "vault": ended by signal: killed`},
		{"timeout", "echo sk-leaked-partial; exec sleep 120", func(p *secretexec.Provider) { p.Timeout = 300 * time.Millisecond },
			`secret provider "vault": did not finish within 300ms (timeoutMs) and was stopped`},
		{"a child holding stdout is stopped with it", "sleep 120; echo sk-leaked", func(p *secretexec.Provider) { p.Timeout = 300 * time.Millisecond },
			`did not finish within 300ms`},
		{"huge output", "exec yes sk-leaked-spam", func(p *secretexec.Provider) { p.MaxOutputBytes = 1024 },
			`secret provider "vault": printed more than 1024 bytes (maxOutputBytes) and was stopped`},
		{"plain output where JSON is required", "echo sk-leaked-plain", nil,
			`secret provider "vault": stdout (16 bytes, not shown) is not a protocol response {"protocolVersion": 1, "values": {…}} (set "jsonOnly": false to take a plain value)`},
		{"wrong protocol version", `printf '{"protocolVersion":2,"values":{"k":"sk-leaked"}}'`, nil, `protocolVersion 2, want 1`},
		{"an error for the id", `printf '{"protocolVersion":1,"values":{},"errors":{"k":{"message":"sk-leaked in the message"}}}'`, nil,
			`secret provider "vault": reported an error for id "k" (its message is not shown: run the command by hand to see it)`},
		{"no value for the id", `printf '{"protocolVersion":1,"values":{"other":"sk-leaked"}}'`, nil, `gave no value for id "k"`},
		{"an empty value", `printf '{"protocolVersion":1,"values":{"k":" "}}'`, nil, `gave an empty value for id "k"`},
		{"a value that is not a string", `printf '{"protocolVersion":1,"values":{"k":{"v":"sk-leaked"}}}'`, nil, `the value for id "k" is not a string`},
		{"plain and empty", "echo", func(p *secretexec.Provider) { p.JSONOnly = false }, `printed nothing for id "k"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := script(t, tc.body)
			if tc.change != nil {
				tc.change(&p)
			}
			v, err := load(t, p, nil, "k")
			switch {
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			case !errors.Is(err, secretexec.ErrProvider):
				t.Errorf("%v is not an ErrProvider", err)
			case strings.Contains(err.Error(), "sk-leaked"):
				t.Errorf("the error quotes the output: %v", err)
			}
			if _, err := v.Secret("vault", "k"); err == nil {
				t.Error("a failed run left a value")
			}
		})
	}
}

// TestEnvironment: the command gets only the variables its provider
// passes from the worker's environment or sets, nothing of the worker
// process's own (HOME, PATH's value, …).
func TestEnvironment(t *testing.T) {
	t.Parallel()
	p := script(t, `printf '{"protocolVersion":1,"values":{"k":"%s|%s|%s|%s"}}' "${HOME-unset}" "${VAULT_ADDR-unset}" "${OTHER-unset}" "${FIXED-unset}"`)
	p.PassEnv = []string{"VAULT_ADDR", "NOT_SET"}
	p.Env = map[string]string{"FIXED": "fixed"}
	env := func(k string) string {
		return map[string]string{"VAULT_ADDR": "https://vault.internal", "OTHER": "sk-not-passed", "HOME": "/home/worker"}[k]
	}
	v, err := load(t, p, env, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Secret("vault", "k"); got.Reveal() != "unset|https://vault.internal|unset|fixed" {
		t.Errorf("environment %q", got.Reveal())
	}
}

// TestRefresh: Run reads the values again at each refresh, telling of
// each new value before it is used; a failed read keeps the last values
// and is reported, naming the provider and not the output.
func TestRefresh(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	// The state changes by rename: the script never reads half a file.
	set := func(v string) {
		t.Helper()
		tmp := filepath.Join(dir, "state.tmp")
		if err := os.WriteFile(tmp, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, state); err != nil {
			t.Fatal(err)
		}
	}
	set("sk-first")
	p := script(t, `v=$(cat `+state+`)
[ "$v" = fail ] && { echo sk-leaked; exit 4; }
printf '{"protocolVersion":1,"values":{"k":"%s"}}' "$v"`)
	p.Refresh = 20 * time.Millisecond
	v, err := load(t, p, nil, "k")
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan error, 1)
	var seen sync.Map // every value read, told before it is used
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		v.Run(ctx, func(vals []provider.Secret) {
			for _, s := range vals {
				seen.Store(s.Reveal(), true)
			}
		}, func(err error) {
			select {
			case reports <- err:
			default: // one is enough
			}
		})
	}()
	defer func() { cancel(); <-done }()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if got, _ := v.Secret("vault", "k"); got.Reveal() == want {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the value never became %q", want)
	}
	set("sk-second")
	waitFor("sk-second")
	if _, ok := seen.Load("sk-second"); !ok {
		t.Error("a refreshed value was used before it was told (to be masked)")
	}
	set("fail")
	select {
	case err := <-reports:
		if !strings.Contains(err.Error(), `secret provider "vault": exited with status 4`) || strings.Contains(err.Error(), "sk-leaked") {
			t.Errorf("report %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no report of the failed refresh")
	}
	if got, _ := v.Secret("vault", "k"); got.Reveal() != "sk-second" {
		t.Errorf("after a failed refresh: %q, want the last value", got.Reveal())
	}
}
