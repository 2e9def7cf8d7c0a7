package registry_test

import (
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/provider/registry"
)

// TestLocalServerProviders: vllm/, ollama/ and lmstudio/ models go to the
// URL of their base-URL variable (a bare origin gets /v1), keylessly, or
// with VLLM_API_KEY when it is set; the unknown-model warning names the
// URL used, not the built-in default.
func TestLocalServerProviders(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", []byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"), 0)
	// Not "localhost" or 127.0.0.1: keyless because the provider is a
	// local server, not because of where it runs.
	origin := strings.Replace(srv.URL, "127.0.0.1", "[::ffff:127.0.0.1]", 1)
	for _, c := range []struct {
		ref  string
		env  map[string]string
		auth string
	}{
		{"vllm/Qwen/Qwen3-8B", map[string]string{"VLLM_BASE_URL": origin + "/v1"}, ""},
		{"vllm/Qwen/Qwen3-8B", map[string]string{"VLLM_BASE_URL": origin, "VLLM_API_KEY": "vk-local"}, "Bearer vk-local"},
		{"ollama/llama3.2", map[string]string{"OLLAMA_BASE_URL": origin + "/"}, ""},
		{"lmstudio/qwen2.5-7b-instruct", map[string]string{"LMSTUDIO_BASE_URL": origin + "/v1/"}, ""},
	} {
		res, p, err := registry.FromEnv(envOf(c.env)).ProviderFor(c.ref)
		if err != nil {
			t.Fatalf("%s: %v", c.ref, err)
		}
		if res.Model.BaseURL != origin+"/v1" || !strings.Contains(res.Warning, origin+"/v1") || strings.Contains(res.Warning, "localhost") {
			t.Errorf("%s: base URL %q, warning %q; want %s/v1 in both", c.ref, res.Model.BaseURL, res.Warning, origin)
		}
		msg, err := p.Stream(t.Context(), &provider.Request{Model: res.Model, Messages: []message.Message{message.User("q", 1)}}, nil)
		if err != nil || msg.Content.Text() != "hi" {
			t.Fatalf("%s: %v %+v", c.ref, err, msg)
		}
		last := srv.Last(t)
		if last.Path != "/v1/chat/completions" || last.Header.Get("Authorization") != c.auth {
			t.Errorf("%s: %s with authorization %q; want /v1/chat/completions with %q", c.ref, last.Path, last.Header.Get("Authorization"), c.auth)
		}
	}
	// The same host for a hosted provider without its key is refused
	// before any request.
	n := len(srv.Requests())
	res, p, err := registry.FromEnv(envOf(map[string]string{"MISTRAL_BASE_URL": origin + "/v1"})).ProviderFor("mistral/devstral-medium-latest")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stream(t.Context(), &provider.Request{Model: res.Model}, nil); err == nil || len(srv.Requests()) != n {
		t.Errorf("hosted provider without a key: %v, %d requests", err, len(srv.Requests())-n)
	}
	if _, err := registry.FromEnv(envOf(map[string]string{"OLLAMA_BASE_URL": "localhost:11434"})).Resolve("ollama/llama3.2"); err == nil || !strings.Contains(err.Error(), "OLLAMA_BASE_URL") {
		t.Errorf("a base URL without scheme: %v", err)
	}
}

// TestConfigKeys: a key given in Config.Keys (a flag) is sent, and wins
// over the environment's.
func TestConfigKeys(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", []byte("data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n"), 0)
	m := provider.Model{ID: "qwen3", Provider: "local", API: "openai-completions", BaseURL: srv.URL + "/v1"}
	r := registry.New(registry.Config{Env: envOf(map[string]string{"LOCAL_API_KEY": "from-env"}), Keys: map[string]provider.Secret{"local": "from-flag"}})
	p, err := r.Provider(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stream(t.Context(), &provider.Request{Model: m}, nil); err != nil {
		t.Fatal(err)
	}
	if got := srv.Last(t).Header.Get("Authorization"); got != "Bearer from-flag" {
		t.Errorf("authorization %q", got)
	}
}
