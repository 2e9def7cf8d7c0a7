package fleet

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/authprofile"
)

// TestSecretsResolveRefs: a profile whose key is held by reference (an
// environment variable, a file) is masked with the value the reference
// reads at start.
func TestSecretsResolveRefs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("sk-from-file-0123456789abcdef\n"), 0o600); err != nil {
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
	}})
	for _, want := range []string{"sk-from-env-0123456789abcdef", "sk-from-file-0123456789abcdef"} {
		if !slices.Contains(got, want) {
			t.Errorf("%q not masked", want)
		}
	}
}
