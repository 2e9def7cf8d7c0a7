package fleet

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/secretexec"
)

// TestSecretsResolveRefs: a profile whose key is held by reference (an
// environment variable, a file, an exec provider's value) is masked with
// the value the reference reads at start; an OAuth profile's refreshRef
// too (before, a refresh token held by reference was not masked).
func TestSecretsResolveRefs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := os.WriteFile(path, []byte("sk-from-file-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A real exec provider: /bin/sh running a script that prints the
	// protocol's answer.
	script := filepath.Join(dir, "vault.sh")
	if err := os.WriteFile(script, []byte(`printf '{"protocolVersion":1,"values":{"openai/team":"sk-from-exec-0123456789abcdef","claude/refresh":"sk-ant-ort01-from-exec-0123456789"}}'`), 0o600); err != nil {
		t.Fatal(err)
	}
	vals, err := secretexec.New(map[string]secretexec.Provider{"vault": {Name: "vault", Command: "/bin/sh", Args: []string{script},
		Timeout: time.Minute, MaxOutputBytes: 1024, JSONOnly: true, Refresh: time.Hour}}, map[string][]string{"vault": {"openai/team", "claude/refresh"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := vals.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == "TEAM_OPENAI_KEY" {
			return "sk-from-env-0123456789abcdef"
		}
		return ""
	}
	got := secrets(Config{Env: env}, &authprofile.Store{Profiles: []authprofile.Profile{
		{ID: "openai:a", Provider: "openai", Type: authprofile.TypeAPIKey, KeyRef: "env:TEAM_OPENAI_KEY"},
		{ID: "anthropic:b", Provider: "anthropic", Type: authprofile.TypeToken, TokenRef: "file:" + path},
		{ID: "openai:c", Provider: "openai", Type: authprofile.TypeAPIKey, KeyRef: "exec:vault:openai/team"},
		{ID: "anthropic:d", Provider: "anthropic", Type: authprofile.TypeOAuth, RefreshRef: "exec:vault:claude/refresh"},
	}}, fleetAuth{env: env, exec: vals}.SecretSources())
	for _, want := range []string{"sk-from-env-0123456789abcdef", "sk-from-file-0123456789abcdef", "sk-from-exec-0123456789abcdef", "sk-ant-ort01-from-exec-0123456789"} {
		if !slices.Contains(got, want) {
			t.Errorf("%q not masked", want)
		}
	}
}

// TestRotatedRefSecretMasked: a secret rotated into a referenced file
// after start is masked from the call that first reads it (before, only
// the value read at start was), and an unchanged one is not added again.
func TestRotatedRefSecretMasked(t *testing.T) {
	t.Parallel()
	red := redact.New()
	a := fleetAuth{seen: &seenSecrets{red: red}}
	const first, second = "sk-rotated-first-0123456789", "sk-rotated-second-0123456789"
	a.NoteSecret("openai:a", provider.Secret(first))
	a.NoteSecret("openai:a", provider.Secret(first))
	if got := red.String("key " + first); strings.Contains(got, first) {
		t.Fatalf("the first key is not masked: %q", got)
	}
	if got := red.String("key " + second); !strings.Contains(got, second) {
		t.Fatalf("a key never read is masked: %q", got)
	}
	a.NoteSecret("openai:a", provider.Secret(second))
	if got := red.String("keys " + first + " " + second); strings.Contains(got, first) || strings.Contains(got, second) {
		t.Fatalf("after rotation: %q", got)
	}
	var _ runner.SecretNoter = a // the runner tells it of every reference it resolves
}
