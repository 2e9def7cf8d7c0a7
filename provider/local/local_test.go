package local_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/lanefleet/lanefleet/internal/refused"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/local"
)

func TestBaseURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080/v1"}, // llama-server's address as it prints it
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080/v1"},
		{"http://localhost:11434/v1/", "http://localhost:11434/v1"},
		{" https://gpu.lan/openai/v1 ", "https://gpu.lan/openai/v1"}, // a path is kept as given
		{"http://[::1]:1234", "http://[::1]:1234/v1"},
		{"localhost:8080", ""},           // no scheme
		{"ftp://host/v1", ""},            // not http
		{"http://u:p@host:8000/v1", ""},  // credentials
		{"http://host:8000/v1?x=1", ""},  // query
		{"http://host:8000/v1#frag", ""}, // fragment
		{"http:///v1", ""},               // no host
		{"", ""},
	} {
		got, err := local.BaseURL(c.in)
		if c.want == "" {
			if err == nil {
				t.Errorf("BaseURL(%q) = %q; want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := local.BaseURL("http://u:secret-pass@host/v1"); err == nil || strings.Contains(err.Error(), "secret-pass") {
		t.Errorf("credentials error %v shows the password", err)
	}
}

// Real servers' answers (trimmed): what each lists and what becomes of it.
func TestDecode(t *testing.T) {
	t.Parallel()
	const base = "http://127.0.0.1:8000/v1"
	for _, c := range []struct {
		name   string
		body   string
		ids    []string
		window []int // per id; 0 = the default
		err    string
	}{
		{name: "llama-server", body: `{"models":[{"name":"qwen3-8b-q4_k_m.gguf","model":"qwen3-8b-q4_k_m.gguf"}],"object":"list",
			"data":[{"id":"qwen3-8b-q4_k_m.gguf","object":"model","created":1,"owned_by":"llamacpp","meta":{"n_ctx_train":40960}}]}`,
			ids: []string{"qwen3-8b-q4_k_m.gguf"}, window: []int{0}},
		{name: "vLLM reports its window", body: `{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","owned_by":"vllm","root":"Qwen/Qwen3-8B","max_model_len":32768}]}`,
			ids: []string{"Qwen/Qwen3-8B"}, window: []int{32768}},
		{name: "Ollama", body: `{"object":"list","data":[{"id":"llama3.2:latest","object":"model","created":1,"owned_by":"library"},{"id":"hf.co/u/m:Q4_K_M","object":"model"}]}`,
			ids: []string{"llama3.2:latest", "hf.co/u/m:Q4_K_M"}, window: []int{0, 0}},
		{name: "a repeated id once", body: `{"data":[{"id":"a"},{"id":"b"},{"id":"a"}]}`, ids: []string{"a", "b"}, window: []int{0, 0}},
		{name: "an absurd window is ignored", body: `{"data":[{"id":"a","max_model_len":99999999999}]}`, ids: []string{"a"}, window: []int{0}},
		{name: "no models", body: `{"object":"list","data":[]}`, err: "lists no models"},
		{name: "not a list", body: `<html>It works!</html>`, err: "not an OpenAI model list"},
		{name: "no data", body: `{"models":[{"name":"x"}]}`, err: "not an OpenAI model list"},
		{name: "empty id", body: `{"data":[{"id":""}]}`, err: "no id"},
		{name: "newline in an id", body: `{"data":[{"id":"a\nlevel=error msg=pwned"}]}`, err: "control"},
		{name: "glob in an id", body: `{"data":[{"id":"*"}]}`, err: "glob"},
		{name: "empty segment", body: `{"data":[{"id":"a//b"}]}`, err: "empty path segment"},
		{name: "id too long", body: `{"data":[{"id":"` + strings.Repeat("x", local.MaxIDBytes+1) + `"}]}`, err: "more than"},
		{name: "too many", body: `{"data":[` + strings.Repeat(`{"id":"a"},`, local.MaxModels) + `{"id":"a"}]}`, err: "more than 1000"},
	} {
		ms, err := local.Decode([]byte(c.body), base)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v; want an error saying %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || len(ms) != len(c.ids) {
			t.Errorf("%s: %+v, %v", c.name, ms, err)
			continue
		}
		for i, m := range ms {
			want := provider.Model{ID: c.ids[i], Provider: local.ProviderName, API: catalog.APIOpenAICompletions, BaseURL: base,
				ContextWindow: catalog.UnknownContextWindow, MaxTokens: local.DefaultMaxTokens}
			if c.window[i] != 0 {
				want.ContextWindow, want.MaxTokens = c.window[i], c.window[i]/4
			}
			if m.ID != want.ID || m.Provider != want.Provider || m.API != want.API || m.BaseURL != want.BaseURL ||
				m.ContextWindow != want.ContextWindow || m.MaxTokens != want.MaxTokens || len(m.Input) != 1 || m.Input[0] != "text" || m.Reasoning {
				t.Errorf("%s: model %d = %+v, want %+v", c.name, i, m, want)
			}
		}
	}
}

func TestDefaultModel(t *testing.T) {
	t.Parallel()
	ms := func(ids ...string) []provider.Model {
		var out []provider.Model
		for _, id := range ids {
			out = append(out, provider.Model{ID: id})
		}
		return out
	}
	for _, c := range []struct {
		ids  []string
		want string
	}{
		{[]string{"qwen3", "llama"}, "qwen3"},
		{[]string{"text-embedding-nomic-embed-text-v1.5", "qwen2.5-7b-instruct"}, "qwen2.5-7b-instruct"}, // LM Studio's order
		{[]string{"nomic-Embed"}, "nomic-Embed"},
	} {
		if m, ok := local.DefaultModel(ms(c.ids...)); !ok || m.ID != c.want {
			t.Errorf("%v: %q", c.ids, m.ID)
		}
	}
	if _, ok := local.DefaultModel(nil); ok {
		t.Error("no models, a default")
	}
}

// TestModels: the listing goes over HTTP with the key when one is set;
// each way it fails says why.
func TestModels(t *testing.T) {
	t.Parallel()
	var auth []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m1"}]}`))
	})
	mux.HandleFunc("GET /locked/v1/models", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"Invalid API Key"}}`, http.StatusUnauthorized)
	})
	mux.HandleFunc("GET /loading/v1/models", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"code":503,"message":"Loading model"}}`, http.StatusServiceUnavailable)
	})
	mux.HandleFunc("GET /huge/v1/models", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"data":[{"id":"` + strings.Repeat("x", local.MaxListBytes) + `"}]}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ms, err := local.Server{BaseURL: srv.URL + "/v1", Key: "sk-local"}.Models(t.Context())
	if err != nil || len(ms) != 1 || ms[0].ID != "m1" || ms[0].BaseURL != srv.URL+"/v1" {
		t.Fatalf("%+v %v", ms, err)
	}
	if _, err := (local.Server{BaseURL: srv.URL + "/v1"}).Models(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(auth) != 2 || auth[0] != "Bearer sk-local" || auth[1] != "" {
		t.Errorf("authorization headers %q; want the key, then none", auth)
	}

	var se *local.StatusError
	_, err = local.Server{BaseURL: srv.URL + "/locked/v1"}.Models(t.Context())
	if !errors.As(err, &se) || se.Status != 401 || !strings.Contains(err.Error(), "Invalid API Key") || !strings.Contains(err.Error(), "wants an API key") {
		t.Errorf("401: %v", err)
	}
	_, err = local.Server{BaseURL: srv.URL + "/loading/v1"}.Models(t.Context())
	if !errors.As(err, &se) || se.Status != 503 || !strings.Contains(err.Error(), "loading") {
		t.Errorf("503: %v", err)
	}
	_, err = local.Server{BaseURL: srv.URL}.Models(t.Context()) // no /v1: the mux's 404
	if !errors.As(err, &se) || se.Status != 404 || !strings.Contains(err.Error(), "/v1") {
		t.Errorf("404: %v", err)
	}
	if _, err = (local.Server{BaseURL: srv.URL + "/huge/v1"}).Models(t.Context()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("huge: %v", err)
	}

	// Nobody listening: the connection's own error.
	closed := "http://" + refused.Addr(t) + "/v1"
	_, err = local.Server{BaseURL: closed}.Models(t.Context())
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), closed+"/models") {
		t.Errorf("refused: %v", err)
	}
}

// FuzzDecode: any body decodes or fails cleanly; what decodes is within
// the bounds and safe to log and match.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"object":"list","data":[{"id":"Qwen/Qwen3-8B","max_model_len":32768}]}`,
		`{"data":[{"id":"a"},{"id":"a"}]}`, `{"data":[]}`, `{"data":null}`, `[]`, `{`, `{"data":[{"id":"a\u0000"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ms, err := local.Decode(body, "http://h/v1")
		if err != nil {
			return
		}
		if len(ms) == 0 || len(ms) > local.MaxModels {
			t.Fatalf("%d models", len(ms))
		}
		for _, m := range ms {
			if m.ID == "" || len(m.ID) > local.MaxIDBytes || strings.ContainsAny(m.ID, "*?[]\\ \n\r\t") ||
				m.ContextWindow <= 0 || m.MaxTokens <= 0 || m.MaxTokens > m.ContextWindow {
				t.Fatalf("decoded %+v", m)
			}
		}
	})
}
