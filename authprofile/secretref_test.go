package authprofile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/provider"
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
		{"exec without providers is not run", authprofile.Profile{ID: "a", KeyRef: "exec:vault:openai/key"}, `auth profile "a": secret reference exec:vault:openai/key: exec secret providers are off`, true},
		{"exec, a command in the id", authprofile.Profile{ID: "a", KeyRef: `{"source":"exec","id":"cat /etc/passwd"}`}, `exec references are exec:PROVIDER:ID (or {"source": "exec", "provider": PROVIDER, "id": ID}), naming a secret provider declared under "secrets": {"providers": …} in the worker's profiles file; a reference never holds a command`, true},
		{"exec, a command in the string form", authprofile.Profile{ID: "a", KeyRef: "exec:op read op://vault/key"}, `a reference never holds a command`, true},
		{"exec, a command in the object", authprofile.Profile{ID: "a", KeyRef: `{"source":"exec","provider":"vault","id":"k","command":"/bin/sh","args":["-c","cat /etc/passwd"]}`}, `a reference object has only source, provider and id`, true},
		{"exec, a path as the provider", authprofile.Profile{ID: "a", KeyRef: "exec:/bin/sh:k"}, `a reference never holds a command`, true},
		{"exec, a dot-dot id", authprofile.Profile{ID: "a", KeyRef: "exec:vault:a/../b"}, `exec provider "vault": the id is`, true},
		{"a named file provider", authprofile.Profile{ID: "a", KeyRef: `{"source":"file","provider":"filemain","id":"/x"}`}, `provider "filemain"`, true},
		{"a secret pasted as its reference", authprofile.Profile{ID: "a", KeyRef: "sk-ant-api03-pasted"}, "want env:NAME, file:/path or exec:PROVIDER:ID", true},
		{"not a name", authprofile.Profile{ID: "a", KeyRef: "env:A B"}, "not a variable name", true},
		{"a secret pasted after env:", authprofile.Profile{ID: "a", KeyRef: "env:sk-ant-api03-pasted"}, "not a variable name", true},
		{"a secret pasted after file:", authprofile.Profile{ID: "a", KeyRef: "file:sk-ant-api03-pasted"}, "absolute path", true},
		{"no secret at all", authprofile.Profile{ID: "a"}, "no secret", true},
	} {
		got, err := tc.p.Secret(authprofile.SecretSources{Env: env})
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
	if got, err := p.Secret(authprofile.SecretSources{}); err != nil || got.Reveal() != "sk-rotated" {
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
	if r, err := p.RefreshSecret(authprofile.SecretSources{}); err != nil || r.Reveal() != "sk-ant-ort01-x" {
		t.Errorf("refresh %v", err)
	}
	p.RefreshRef = "env:NOPE"
	if _, err := p.RefreshSecret(authprofile.SecretSources{}); err == nil || !strings.Contains(err.Error(), `auth profile "anthropic:sub": refreshRef: secret reference env:NOPE: the variable is not set`) {
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

// TestExecRefs: an exec reference, in either form, names a provider and
// an id; its value is what the sources' Exec returns, and a failure
// names the reference and wraps the cause.
func TestExecRefs(t *testing.T) {
	t.Parallel()
	errMissing := errors.New("no value")
	src := authprofile.SecretSources{Exec: func(prov, id string) (provider.Secret, error) {
		if prov == "vault" && id == "providers/openai:key" {
			return "sk-exec-secret", nil
		}
		return "", errMissing
	}}
	for _, ref := range []string{"exec:vault:providers/openai:key", `{"source": "exec", "provider": "vault", "id": "providers/openai:key"}`} {
		r, err := authprofile.ParseSecretRef(ref)
		if err != nil || r != (authprofile.SecretRef{Source: authprofile.RefExec, Provider: "vault", Name: "providers/openai:key"}) {
			t.Fatalf("%s: %+v, %v", ref, r, err)
		}
		if got, err := (authprofile.Profile{ID: "openai:v", KeyRef: ref}).Secret(src); err != nil || got.Reveal() != "sk-exec-secret" {
			t.Errorf("%s: %v", ref, err)
		}
	}
	_, err := (authprofile.Profile{ID: "openai:v", KeyRef: "exec:vault:other"}).Secret(src)
	if !errors.Is(err, errMissing) || !errors.Is(err, authprofile.ErrSecretRef) || !strings.Contains(err.Error(), `auth profile "openai:v": secret reference exec:vault:other: no value`) {
		t.Errorf("missing value: %v", err)
	}
	_, err = (authprofile.Profile{ID: "openai:v", KeyRef: "exec:vault:other"}).Secret(authprofile.SecretSources{})
	if !errors.Is(err, authprofile.ErrExecOff) {
		t.Errorf("no providers: %v", err)
	}
}

// FuzzParseSecretRef: the parser never panics, a reference it accepts
// reads back the same from its String, and a refused exec reference never
// quotes what followed its provider (a command line may hold a secret).
func FuzzParseSecretRef(f *testing.F) {
	for _, s := range []string{"env:TEAM_KEY", "file:/run/secrets/k", "exec:vault:providers/openai/apiKey",
		`{"source":"exec","provider":"vault","id":"a:b"}`, `{"source":"env","provider":"default","id":"X"}`,
		"exec:op read op://SECRETVALUE", `{"source":"exec","provider":"v","id":"SECRETVALUE x"}`, "exec:vault:../SECRETVALUE",
		`{"source":"exec","provider":"v","id":"k","command":"SECRETVALUE"}`, "sk-SECRETVALUE", "exec:", "{", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := authprofile.ParseSecretRef(s)
		if err != nil {
			if !errors.Is(err, authprofile.ErrSecretRef) {
				t.Fatalf("%q: %v is not an ErrSecretRef", s, err)
			}
			if strings.Contains(s, "exec") && strings.Contains(s, "SECRETVALUE") && strings.Contains(err.Error(), "SECRETVALUE") {
				t.Fatalf("%q: the error quotes it: %v", s, err)
			}
			return
		}
		again, err := authprofile.ParseSecretRef(r.String())
		if err != nil || again != r {
			t.Fatalf("%q: %+v reads back as %+v, %v", s, r, again, err)
		}
	})
}
