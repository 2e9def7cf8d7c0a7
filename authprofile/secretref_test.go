package authprofile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
)

// TestSecretRefs: a profile's keyRef or tokenRef is read when the secret
// is asked for (a changed file gives the new value), a literal wins, and
// every failure names the reference, never a secret.
func TestSecretRefs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte("  sk-file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, authprofile.MaxSecretFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		return map[string]string{"TEAM_KEY": "sk-env-secret"}[k]
	}
	for _, tc := range []struct {
		name string
		p    authprofile.Profile
		want string // the secret, or a part of the error
		err  bool
	}{
		{"env", authprofile.Profile{ID: "a", KeyRef: "env:TEAM_KEY"}, "sk-env-secret", false},
		{"OpenClaw's object form", authprofile.Profile{ID: "a", KeyRef: `{"source":"env","provider":"default","id":"TEAM_KEY"}`}, "sk-env-secret", false},
		{"file, trimmed", authprofile.Profile{ID: "a", TokenRef: "file:" + file}, "sk-file-secret", false},
		{"a literal wins", authprofile.Profile{ID: "a", Key: "sk-literal", KeyRef: "env:TEAM_KEY"}, "sk-literal", false},
		{"unset variable", authprofile.Profile{ID: "a", KeyRef: "env:NOPE"}, `auth profile "a": secret reference env:NOPE: the variable is not set`, true},
		{"missing file", authprofile.Profile{ID: "a", KeyRef: "file:" + filepath.Join(dir, "none")}, "no such file", true},
		{"empty file", authprofile.Profile{ID: "a", KeyRef: "file:" + empty}, "the file is empty", true},
		{"oversized file", authprofile.Profile{ID: "a", KeyRef: "file:" + big}, "larger than", true},
		{"relative path", authprofile.Profile{ID: "a", KeyRef: "file:key"}, "absolute path", true},
		{"unknown source", authprofile.Profile{ID: "a", KeyRef: "vault:x"}, `source "vault"`, true},
		{"exec is not run", authprofile.Profile{ID: "a", KeyRef: `{"source":"exec","id":"cat /etc/passwd"}`}, `source "exec": command references are refused (a worker runs no program a profiles file names): have the command write the secret to a file and name it with file:/path, or put it in the worker's environment and use env:NAME`, true},
		{"exec, string form, says what instead", authprofile.Profile{ID: "a", KeyRef: "exec:op read op://vault/key"}, `source "exec": command references are refused (a worker runs no program a profiles file names): have the command write the secret to a file and name it with file:/path`, true},
		{"a secret pasted as its reference", authprofile.Profile{ID: "a", KeyRef: "sk-ant-api03-pasted"}, "want env:NAME or file:/path", true},
		{"not a name", authprofile.Profile{ID: "a", KeyRef: "env:A B"}, "not a variable name", true},
		{"no secret at all", authprofile.Profile{ID: "a"}, "no secret", true},
	} {
		got, err := tc.p.Secret(env)
		switch {
		case tc.err && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		case tc.err && (strings.Contains(err.Error(), "sk-") || strings.Contains(err.Error(), "op://") || strings.Contains(err.Error(), "passwd")):
			t.Errorf("%s: error %v holds a secret", tc.name, err)
		case tc.err && tc.p.KeyRef != "" && !errors.Is(err, authprofile.ErrSecretRef):
			t.Errorf("%s: error %v is not an ErrSecretRef", tc.name, err)
		case !tc.err && (err != nil || got.Reveal() != tc.want):
			t.Errorf("%s: %v, %v", tc.name, got == "", err)
		}
	}
	// Read at use: a rotated file is the next call's secret.
	p := authprofile.Profile{ID: "a", KeyRef: "file:" + file}
	if err := os.WriteFile(file, []byte("sk-rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Secret(nil); err != nil || got.Reveal() != "sk-rotated" {
		t.Errorf("rotated file: %v", err)
	}
}

// TestDecodeStoreKeepsRefs: auth-profiles.json's keyRef and tokenRef
// (strings or objects) are kept as references, not values.
func TestDecodeStoreKeepsRefs(t *testing.T) {
	t.Parallel()
	s, err := authprofile.DecodeStore([]byte(`{"profiles": {
		"openai:team": {"type": "api_key", "provider": "openai", "keyRef": "env:TEAM_OPENAI_KEY"},
		"anthropic:sub": {"type": "token", "provider": "anthropic", "tokenRef": {"source": "env", "id": "CLAUDE_TOKEN"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Profile("openai:team")
	b, _ := s.Profile("anthropic:sub")
	if a.KeyRef != "env:TEAM_OPENAI_KEY" || a.Key != "" || !strings.Contains(b.TokenRef, "CLAUDE_TOKEN") {
		t.Errorf("refs %+v %+v", a, b)
	}
	if _, err := authprofile.ParseSecretRef(b.TokenRef); err != nil {
		t.Error(err)
	}
}

// TestRefreshRef: an OAuth profile's refreshRef is kept as a reference,
// makes the profile valid, and is read at use like the other references.
func TestRefreshRef(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "refresh")
	if err := os.WriteFile(file, []byte("sk-ant-ort01-x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := authprofile.DecodeStore([]byte(`{"profiles": {"anthropic:sub": {"type": "oauth", "provider": "anthropic", "refreshRef": "file:` + file + `"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Profile("anthropic:sub")
	if p.RefreshRef != "file:"+file || p.Refresh != "" || !(authprofile.Config{}).Valid(p, "anthropic", time.Now()) {
		t.Fatalf("profile %+v", p)
	}
	if r, err := p.RefreshSecret(nil); err != nil || r.Reveal() != "sk-ant-ort01-x" {
		t.Errorf("refresh %v", err)
	}
	p.RefreshRef = "env:NOPE"
	if _, err := p.RefreshSecret(nil); err == nil || !strings.Contains(err.Error(), `auth profile "anthropic:sub": refreshRef: secret reference env:NOPE: the variable is not set`) {
		t.Errorf("unset: %v", err)
	}
}

// TestRefsMakeProfilesValid: a profile whose secret is a reference may
// serve its provider (it is read at use), as OpenClaw counts a keyRef as a
// configured key.
func TestRefsMakeProfilesValid(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, p := range []authprofile.Profile{
		{ID: "a", Type: authprofile.TypeAPIKey, Provider: "azure", KeyRef: "env:TEAM_AZURE_KEY"},
		{ID: "b", Type: authprofile.TypeToken, Provider: "azure", TokenRef: "file:/run/secrets/azure"},
	} {
		if !(authprofile.Config{}).Valid(p, "azure", now) {
			t.Errorf("%s not valid", p.ID)
		}
	}
	expired := authprofile.Profile{ID: "c", Type: authprofile.TypeToken, Provider: "azure", TokenRef: "env:X", Expires: now.Add(-time.Minute).UnixMilli()}
	if (authprofile.Config{}).Valid(expired, "azure", now) {
		t.Error("an expired token reference is valid")
	}
}
