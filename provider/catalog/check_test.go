package catalog_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
)

// TestLoadFileChecks: a models file whose entries no adapter could call
// fails to load, naming the model and what is missing; entries that only
// change a model already in the catalog need neither api nor baseUrl.
func TestLoadFileChecks(t *testing.T) {
	t.Parallel()
	// A server's models, as --openai-compatible adds them before the file.
	base := catalog.Builtin().With(provider.Model{ID: "qwen3", Provider: "local", API: catalog.APIOpenAICompletions,
		BaseURL: "http://127.0.0.1:8080/v1", ContextWindow: 128000, MaxTokens: 8192})
	for _, c := range []struct {
		name, file string
		want       []string // substrings of the error; nil = loads
	}{
		{name: "unknown provider without api", file: `[{"provider":"acme","id":"m1","baseUrl":"http://gpu:8000/v1"}]`,
			want: []string{"acme/m1", `no "api"`, `provider "acme" is not built in`, catalog.APIOpenAICompletions}},
		{name: "provider block without api", file: `{"providers":{"acme":{"baseUrl":"http://gpu:8000/v1","models":[{"id":"m1"}]}}}`,
			want: []string{"acme/m1", `no "api"`}},
		{name: "unknown provider without baseUrl", file: `[{"provider":"acme","id":"m1","api":"openai-completions"}]`,
			want: []string{"acme/m1", `"baseUrl" ""`}},
		{name: "a baseUrl that is not http", file: `[{"provider":"acme","id":"m1","api":"openai-completions","baseUrl":"gpu:8000"}]`,
			want: []string{"acme/m1", `"gpu:8000"`}},
		{name: "unsupported api", file: `[{"provider":"acme","id":"m1","api":"mistral-conversations","baseUrl":"http://gpu/v1"}]`,
			want: []string{"acme/m1", "mistral-conversations", catalog.APIAnthropicMessages}},
		{name: "complete custom provider", file: `{"providers":{"acme":{"baseUrl":"http://gpu:8000/v1","api":"openai-completions","models":[{"id":"m1"}]}}}`},
		{name: "known provider: api and baseUrl filled in", file: `[{"provider":"groq","id":"new-model"},{"provider":"openai","id":"o","api":"openai-completions"}]`},
		{name: "changing a listed server model", file: `[{"provider":"local","id":"qwen3","contextWindow":32768}]`},
	} {
		path := filepath.Join(t.TempDir(), "models.json")
		if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		cat, err := base.LoadFile(path)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if err := cat.Check(); err != nil {
				t.Errorf("%s: loaded catalog fails its check: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: loaded; want an error", c.name)
			continue
		}
		for _, w := range append(c.want, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
	cat, err := catalog.Builtin().LoadFile(writeFile(t, `[{"provider":"openai","id":"o","api":"openai-completions"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := cat.Lookup("openai/o"); m.BaseURL != "https://api.openai.com/v1" || m.API != catalog.APIOpenAICompletions {
		t.Errorf("known provider with an api: %+v", m)
	}
	cat, err = base.LoadFile(writeFile(t, `[{"provider":"local","id":"qwen3","contextWindow":32768}]`))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := cat.Lookup("local/qwen3"); m.ContextWindow != 32768 || m.BaseURL != "http://127.0.0.1:8080/v1" || m.MaxTokens != 8192 {
		t.Errorf("listed model not merged: %+v", m)
	}
}

// TestLoadFileTooLarge: a models file is read up to MaxFileBytes.
func TestLoadFileTooLarge(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "models.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(catalog.MaxFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := catalog.Builtin().LoadFile(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("%v", err)
	}
}

func writeFile(t *testing.T, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// FuzzParse: any input parses or fails cleanly; what parses has an id and
// a provider on every model, and a known api where it has one.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`[{"id":"m","provider":"mistral"}]`,
		`{"models":[{"id":"m","provider":"p","api":"openai-completions","baseUrl":"http://x/v1"}]}`,
		`{"providers":{"acme":{"baseUrl":"http://gpu:8000/v1","api":"openai-completions","models":[{"id":"m1","contextWindow":1}]}}}`,
		`[{"id":"x"}]`, `{`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := catalog.Parse(data)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.ID == "" || m.Provider == "" || (m.API != "" && !catalog.KnownAPI(m.API)) {
				t.Fatalf("parsed %+v", m)
			}
		}
		_ = catalog.New(ms...).Check()
	})
}
