package authstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/secretexec"
)

// execFiles writes a provider script that marks each run (ran) and
// answers the protocol for id "openai/team", and a profiles file that
// declares it as provider "vault" (/bin/sh running the script) with
// profiles.
func execFiles(t *testing.T, profiles string) (path, ran string) {
	t.Helper()
	dir := t.TempDir()
	ran = filepath.Join(dir, "ran")
	script := filepath.Join(dir, "vault.sh")
	body := "echo >> " + ran + "\nprintf '{\"protocolVersion\":1,\"values\":{\"openai/team\":\"sk-exec-team-0123456789\"}}'\n"
	if err := os.WriteFile(script, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, fmt.Sprintf(`{"secrets": {"providers": {"vault": {"source": "exec", "command": "/bin/sh", "args": [%q]}}},
		"profiles": {%s}}`, script, profiles)), ran
}

// TestLoadCredentialsExec: an exec reference is read from the provider
// the operator's file declares, once at start, only with SecretExec; off
// (the default) it stops the worker naming --secret-exec, and nothing
// runs; a provider the file does not declare is refused.
func TestLoadCredentialsExec(t *testing.T) {
	t.Parallel()
	const team = `"openai:team": {"type": "api_key", "provider": "openai", "keyRef": "exec:vault:openai/team"}`
	path, ran := execFiles(t, team)
	ctx := t.Context()

	_, _, err := LoadCredentials(ctx, CredentialsConfig{Path: path})
	want := `auth profile "openai:team": secret reference exec:vault:openai/team: exec secret providers are off: start the worker with --secret-exec to run the commands this file declares under "secrets": {"providers": …}`
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, authprofile.ErrExecOff) {
		t.Fatalf("without SecretExec: %v", err)
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the provider ran without SecretExec: %v", err)
	}

	creds, exec, err := LoadCredentials(ctx, CredentialsConfig{Path: path, SecretExec: true})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := creds.Profile("openai:team")
	k, err := p.Secret(authprofile.SecretSources{Exec: exec.Secret})
	if err != nil || k.Reveal() != "sk-exec-team-0123456789" {
		t.Fatalf("secret: %v", err)
	}
	if b, _ := os.ReadFile(ran); string(b) != "\n" {
		t.Errorf("the provider ran %d times at start, want once (reads come from memory)", strings.Count(string(b), "\n"))
	}

	undeclared, _ := execFiles(t, `"openai:team": {"type": "api_key", "provider": "openai", "keyRef": {"source": "exec", "provider": "nosuch", "id": "k"}}`)
	_, _, err = LoadCredentials(ctx, CredentialsConfig{Path: undeclared, SecretExec: true})
	if err == nil || !strings.Contains(err.Error(), `auth profile "openai:team": secret reference exec:nosuch:k: no secret provider "nosuch" is declared under "secrets": {"providers": …} in this file`) {
		t.Errorf("undeclared provider: %v", err)
	}

	// A provider that fails stops the worker, naming it and not what it
	// printed.
	bad := writeFile(t, `{"secrets": {"providers": {"vault": {"source": "exec", "command": "/bin/sh", "args": ["-c", "echo sk-leaked; exit 2"]}}},
		"profiles": {`+team+`}}`)
	_, _, err = LoadCredentials(ctx, CredentialsConfig{Path: bad, SecretExec: true})
	if err == nil || !strings.Contains(err.Error(), `secret provider "vault": exited with status 2`) || strings.Contains(err.Error(), "sk-leaked") || !errors.Is(err, secretexec.ErrProvider) {
		t.Errorf("failing provider: %v", err)
	}
}

// TestProfilesComeOnlyFromTheFile pins where a profile, and so a secret
// reference, can come from: the operator's file and the provider key
// variables. A key variable that reads like a reference is a literal
// key; a reference carrying a command is refused wherever it is
// written; and what a bucket writer puts under a profile's key is usage
// state, never a profile nor a reference (Snapshot's profiles are the
// file's).
func TestProfilesComeOnlyFromTheFile(t *testing.T) {
	t.Parallel()
	creds, exec, err := LoadCredentials(t.Context(), CredentialsConfig{SecretExec: true,
		Env: func(k string) string { return map[string]string{"OPENAI_API_KEY": "exec:vault:openai/team"}[k] }})
	if err != nil || exec != nil {
		t.Fatalf("%v, %v", exec, err)
	}
	if p, _ := creds.Profile("openai:env"); p.Key.Reveal() != "exec:vault:openai/team" || p.KeyRef != "" {
		t.Errorf("an environment key became a reference: %+v", p)
	}

	path, ran := execFiles(t, `"openai:team": {"type": "api_key", "provider": "openai", "keyRef": {"source": "exec", "provider": "vault", "id": "k", "command": "/bin/sh", "args": ["-c", "id"]}}`)
	_, _, err = LoadCredentials(t.Context(), CredentialsConfig{Path: path, SecretExec: true})
	if err == nil || !strings.Contains(err.Error(), `auth profile "openai:team": secret reference: key "args": a reference object has only source, provider and id; exec references are exec:PROVIDER:ID`) {
		t.Errorf("a command in a reference: %v", err)
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a provider ran for a refused reference: %v", err)
	}

	b := setup(t)
	s := b.open(t, Config{})
	file := &authprofile.Store{Version: 1, Profiles: []authprofile.Profile{{ID: "openai:team", Type: authprofile.TypeAPIKey, Provider: "openai", Key: "sk-file"}}}
	kv := b.kv(t)
	var last uint64
	for _, id := range []string{"openai:team", "openai:injected"} {
		tok, err := events.KeyToken(id)
		if err != nil {
			t.Fatal(err)
		}
		last, err = kv.Put(context.Background(), "p."+tok, []byte(`{"type": "api_key", "provider": "openai", "keyRef": "exec:vault:k", "command": "/bin/sh", "errorCount": 1}`))
		if err != nil {
			t.Fatal(err)
		}
	}
	tok, _ := events.KeyToken("openai:injected")
	seen(t, s, "p."+tok, last)
	snap := s.Snapshot(file)
	if len(snap.Profiles) != 1 || snap.Profiles[0].ID != "openai:team" || snap.Profiles[0].KeyRef != "" || snap.Profiles[0].Key.Reveal() != "sk-file" {
		t.Errorf("profiles after a bucket write: %+v", snap.Profiles)
	}
}
