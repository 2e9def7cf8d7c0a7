package catalog_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/provider/catalog"
)

func TestBuiltin(t *testing.T) {
	t.Parallel()
	c := catalog.Builtin()
	ms := c.Models()
	if len(ms) < 20 {
		t.Fatalf("only %d models", len(ms))
	}
	for _, m := range ms {
		if !catalog.KnownAPI(m.API) || m.BaseURL == "" || m.ContextWindow == 0 || m.MaxTokens == 0 || len(m.Input) == 0 {
			t.Errorf("incomplete entry %+v", m)
		}
	}
	m, ok := c.Lookup("anthropic/claude-opus-4-6")
	if !ok || m.ContextWindow != 1000000 || m.MaxTokens != 128000 || m.Cost.CacheWrite != 6.25 {
		t.Errorf("opus 4.6: %+v", m)
	}
	r, err := c.Resolve("openrouter/anthropic/claude-sonnet-4.5")
	if err != nil || r.Warning != "" || r.Model.ID != "anthropic/claude-sonnet-4.5" {
		t.Errorf("openrouter: %+v %v", r, err)
	}
}

func TestResolveUnknown(t *testing.T) {
	t.Parallel()
	c := catalog.Builtin()
	r, err := c.Resolve("groq/some-new-model")
	if err != nil {
		t.Fatal(err)
	}
	if r.Warning == "" || r.Model.API != catalog.APIOpenAICompletions || r.Model.BaseURL != "https://api.groq.com/openai/v1" ||
		r.Model.ContextWindow != catalog.UnknownContextWindow || r.Model.MaxTokens != catalog.UnknownMaxTokens || r.Model.Reasoning {
		t.Errorf("got %+v", r)
	}
	if _, err := c.Resolve("nobody/x"); !errors.Is(err, catalog.ErrUnknownProvider) {
		t.Errorf("unknown provider: %v", err)
	}
	if _, err := c.Resolve("noslash"); err == nil {
		t.Error("want error for a ref without provider")
	}
}

func TestUserFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "models.json")
	data := `{"providers": {
		"local": {"baseUrl": "http://127.0.0.1:9999/v1", "api": "openai-completions", "models": [{"id": "qwen3", "contextWindow": 32768, "maxTokens": 4096}]},
		"anthropic": {"models": [{"id": "claude-sonnet-4-6", "baseUrl": "https://proxy.example/anthropic"}]}
	}}`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := catalog.Builtin().LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := c.Lookup("local/qwen3")
	if !ok || m.API != catalog.APIOpenAICompletions || m.BaseURL != "http://127.0.0.1:9999/v1" || m.ContextWindow != 32768 {
		t.Errorf("local: %+v", m)
	}
	s, _ := c.Lookup("anthropic/claude-sonnet-4-6")
	if s.BaseURL != "https://proxy.example/anthropic" || s.ContextWindow != 1000000 || s.API != catalog.APIAnthropicMessages {
		t.Errorf("override not merged: %+v", s)
	}
	if r, err := c.Resolve("local/other"); err != nil || r.Model.BaseURL != "http://127.0.0.1:9999/v1" {
		t.Errorf("provider from user file: %+v %v", r, err)
	}

	for _, bad := range []string{`[{"id":"x"}]`, `[{"id":"x","provider":"p","api":"bogus"}]`, `{`} {
		if _, err := catalog.Parse([]byte(bad)); err == nil {
			t.Errorf("%s: want error", bad)
		}
	}
	if ms, err := catalog.Parse([]byte(`[{"id":"m","provider":"mistral"}]`)); err != nil || ms[0].API != catalog.APIOpenAICompletions || !strings.Contains(ms[0].BaseURL, "mistral") {
		t.Errorf("defaults from known provider: %+v %v", ms, err)
	}
	if _, err := catalog.Builtin().LoadFile(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
