package authstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/authprofile"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "auth-profiles.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadCredentials(t *testing.T) {
	t.Parallel()
	file := `{"version":1,"profiles":{
		"anthropic:work":{"type":"api_key","provider":"anthropic","key":"sk-file"},
		"google:env":{"mode":"api_key","provider":"google","apiKey":"g-file"}
	},"order":{"anthropic":["anthropic:work"]},"lastGood":{"anthropic":"anthropic:work"},
	"usageStats":{"anthropic:work":{"errorCount":2}}}`
	env := envOf(map[string]string{
		"ANTHROPIC_API_KEY": " sk-env ",
		"GOOGLE_API_KEY":    "g2", "GEMINI_API_KEY": "g1", // google:env comes from the file
		"MISTRAL_API_KEY": "  ", // blank: no profile
		"OPENAI_API_KEY":  "sk-openai",
	})
	tests := []struct {
		name string
		path string
		env  func(string) string
		want map[string]string // id → provider/secret
	}{
		// No file, no environment: no profiles.
		{"nothing", "", nil, map[string]string{}},
		// No file: environment keys only.
		{"env only", "", env,
			map[string]string{"anthropic:env": "anthropic/sk-env", "google:env": "google/g1", "openai:env": "openai/sk-openai"}},
		// The file's profiles come first; a file profile wins over the
		// environment's profile of the same id.
		{"file and env", writeFile(t, file), env,
			map[string]string{"anthropic:work": "anthropic/sk-file", "google:env": "google/g-file", "anthropic:env": "anthropic/sk-env", "openai:env": "openai/sk-openai"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			creds, err := loadCreds(t, tt.path, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, p := range creds.Profiles {
				got[p.ID] = p.Provider + "/" + p.Key.Reveal()
			}
			if len(got) != len(tt.want) {
				t.Errorf("profiles = %v, want %v", got, tt.want)
			}
			for id, w := range tt.want {
				if got[id] != w {
					t.Errorf("%s = %q, want %q", id, got[id], w)
				}
			}
			if creds.Usage != nil || creds.LastGood != nil {
				t.Errorf("file state kept: usage %v, lastGood %v", creds.Usage, creds.LastGood)
			}
		})
	}

	creds, err := loadCreds(t, writeFile(t, file), env)
	if err != nil {
		t.Fatal(err)
	}
	if creds.Profiles[0].ID != "anthropic:work" || len(creds.Order["anthropic"]) != 1 {
		t.Errorf("file order lost: %+v", creds)
	}
	// The explicit order of the file leaves the environment profile out.
	ids := authprofile.Order(*creds, authprofile.Config{}, authprofile.OrderRequest{Provider: "anthropic"}, t0)
	if len(ids) != 1 || ids[0] != "anthropic:work" {
		t.Errorf("order = %v", ids)
	}
}

// A file that exists but cannot be parsed is an error naming the file, and
// the error never quotes the secret in it.
func TestLoadCredentialsMalformed(t *testing.T) {
	t.Parallel()
	for _, content := range []string{
		`{"profiles":{"a":{"type":"api_key","provider":"p","key":"sk-secret-123"}`,
		`["sk-secret-123"]`,
		`{"profiles":["sk-secret-123"]}`,
		`sk-secret-123`,
	} {
		path := writeFile(t, content)
		_, err := loadCreds(t, path, nil)
		if err == nil {
			t.Errorf("%s: no error", content)
			continue
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name the file", err)
		}
		if !errors.Is(err, authprofile.ErrInvalidStore) {
			t.Errorf("error %q does not wrap authprofile.ErrInvalidStore", err)
		}
		if strings.Contains(err.Error(), "secret-123") {
			t.Errorf("error %q quotes the file", err)
		}
	}
	// A path that is a directory cannot be read.
	if _, err := loadCreds(t, filepath.Join(t.TempDir(), "absent.json"), nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a missing file: %v, want an error saying so", err)
	}
	if _, err := loadCreds(t, t.TempDir(), nil); err == nil {
		t.Error("directory: no error")
	}
}
