package registry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/provider/registry"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestHasAPIKey(t *testing.T) {
	t.Parallel()
	if registry.HasAPIKey(nil) || registry.HasAPIKey(envOf(nil)) {
		t.Error("empty env has no key")
	}
	if registry.HasAPIKey(envOf(map[string]string{"OLLAMA_BASE_URL": "http://x", "ANTHROPIC_API_KEY": "  "})) {
		t.Error("blank key and keyless local servers do not count")
	}
	for _, k := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY", "MISTRAL_API_KEY"} {
		if !registry.FromEnv(envOf(map[string]string{k: "x"})).HasAPIKey() {
			t.Errorf("%s not detected", k)
		}
	}
	r := registry.FromEnv(envOf(map[string]string{"GOOGLE_API_KEY": "g2", "GEMINI_API_KEY": "g1"}))
	if k, ok := r.APIKey("google"); !ok || k.Reveal() != "g1" {
		t.Errorf("GEMINI_API_KEY wins: %v", ok)
	}
}

func TestProviderEndToEnd(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", []byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"), 0)
	r := registry.FromEnv(envOf(map[string]string{"MISTRAL_API_KEY": "mk-secret", "MISTRAL_BASE_URL": srv.URL + "/v1"}))
	res, p, err := r.ProviderFor("mistral/devstral-medium-latest")
	if err != nil || res.Warning != "" {
		t.Fatal(err, res.Warning)
	}
	if res.Model.BaseURL != srv.URL+"/v1" {
		t.Errorf("base url %s", res.Model.BaseURL)
	}
	msg, err := p.Stream(t.Context(), &provider.Request{Model: res.Model, Messages: []message.Message{message.User("q", 1)}}, nil)
	if err != nil || msg.Content.Text() != "hi" {
		t.Fatal(err)
	}
	if h := srv.Last(t).Header.Get("Authorization"); h != "Bearer mk-secret" {
		t.Errorf("authorization %q", h)
	}
}

func TestProviderErrors(t *testing.T) {
	t.Parallel()
	r := registry.FromEnv(envOf(nil))
	res, p, err := r.ProviderFor("openrouter/some/new-model")
	if err != nil || res.Warning == "" {
		t.Fatalf("unknown model should resolve with a warning: %v", err)
	}
	var events []provider.Event
	msg, err := p.Stream(t.Context(), &provider.Request{Model: res.Model}, func(e provider.Event) { events = append(events, e) })
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Reason != provider.ReasonAuth || !strings.Contains(pe.Message, "No API key found") {
		t.Errorf("missing key: %v", err)
	}
	if msg.StopReason != message.StopError || len(events) != 1 || events[0].Type != provider.EventError {
		t.Errorf("message %+v events %+v", msg, events)
	}
	if _, err := r.Provider(provider.Model{ID: "x", Provider: "y", API: "mistral-conversations"}); !errors.Is(err, registry.ErrUnsupportedAPI) {
		t.Errorf("unsupported api: %v", err)
	}
}

func TestAnthropicDispatch(t *testing.T) {
	t.Parallel()
	body := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"yo\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	srv := wiretest.ServeBody(t, 200, "text/event-stream", []byte(body), 0)
	r := registry.FromEnv(envOf(map[string]string{"ANTHROPIC_API_KEY": "ak", "ANTHROPIC_BASE_URL": srv.URL}))
	res, p, err := r.ProviderFor("anthropic/claude-sonnet-4-6")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := p.Stream(t.Context(), &provider.Request{Model: res.Model, Messages: []message.Message{message.User("q", 1)}}, nil)
	if err != nil || msg.Content.Text() != "yo" || msg.Usage.Cost.Total == 0 {
		t.Fatalf("%v %+v", err, msg)
	}
	if srv.Last(t).Header.Get("X-Api-Key") != "ak" {
		t.Error("key not sent")
	}
}

func TestCustomProviderKey(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", []byte("data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n"), 0)
	m := provider.Model{ID: "llama", Provider: "my-gpu.box", API: "openai-completions", BaseURL: srv.URL + "/v1"}
	for _, tc := range []struct {
		env  map[string]string
		auth string
	}{{map[string]string{"MY_GPU_BOX_API_KEY": "ck"}, "Bearer ck"}, {nil, ""}} {
		p, err := registry.FromEnv(envOf(tc.env)).Provider(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Stream(t.Context(), &provider.Request{Model: m}, nil); err != nil {
			t.Fatal(err)
		}
		if got := srv.Last(t).Header.Get("Authorization"); got != tc.auth {
			t.Errorf("authorization %q, want %q", got, tc.auth)
		}
	}
}
