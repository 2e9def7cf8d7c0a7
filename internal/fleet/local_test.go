package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/refused"
	"github.com/lanefleet/lanefleet/provider/registry"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// modelsServer answers GET /v1/models with body after failing the first
// fails requests with 503 (a server loading its model).
func modelsServer(t *testing.T, fails int32, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := n.Add(1)
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		if k <= fails {
			http.Error(w, `{"error":{"code":503,"message":"Loading model"}}`, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func testLog(t *testing.T) zerolog.Logger { return zerolog.New(zerolog.NewTestWriter(t)) }

// TestLoadCatalogServer: the server's models join the catalog, in its
// order, and the models file may change them.
func TestLoadCatalogServer(t *testing.T) {
	t.Parallel()
	srv, _ := modelsServer(t, 0, `{"data":[{"id":"text-embedding-nomic"},{"id":"Qwen/Qwen3-8B","max_model_len":40960}]}`)
	models := writeTemp(t, `[{"provider":"local","id":"Qwen/Qwen3-8B","reasoning":true}]`)
	cat, served, err := loadCatalog(t.Context(), Config{OpenAICompatible: srv.URL, ModelsFile: models}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(served) != 2 || served[1].Ref() != "local/Qwen/Qwen3-8B" || !served[1].Reasoning || served[1].ContextWindow != 40960 ||
		served[1].BaseURL != srv.URL+"/v1" {
		t.Fatalf("served %+v", served)
	}
	if m, ok := cat.Lookup("local/Qwen/Qwen3-8B"); !ok || !m.Reasoning {
		t.Errorf("catalog %+v", m)
	}
	r := registry.NewResolver(registry.ResolverConfig{Env: func(k string) string { return map[string]string{"ANTHROPIC_API_KEY": "ak"}[k] }, Catalog: cat, Served: served})
	if got := r.DefaultModel(); got != "local/Qwen/Qwen3-8B" {
		t.Errorf("default model %q: want the server's first chat model, before the keys'", got)
	}
}

// TestListServerWaits: a server that answers 503 while it loads is asked
// again within --openai-compatible-wait; without a wait, or past it, the
// worker fails with the reason.
func TestListServerWaits(t *testing.T) {
	t.Parallel()
	const list = `{"data":[{"id":"m1"}]}`
	srv, n := modelsServer(t, 2, list)
	ms, err := listServer(t.Context(), Config{OpenAICompatible: srv.URL, OpenAICompatibleWait: time.Minute}, testLog(t))
	if err != nil || len(ms) != 1 || n.Load() != 3 {
		t.Fatalf("%+v %v after %d requests", ms, err, n.Load())
	}
	srv, n = modelsServer(t, 1, list)
	_, err = listServer(t.Context(), Config{OpenAICompatible: srv.URL}, testLog(t))
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "--openai-compatible-wait") || n.Load() != 1 {
		t.Fatalf("no wait: %v after %d requests", err, n.Load())
	}
	// A wrong URL does not get better by waiting: one request.
	srv, n = modelsServer(t, 0, list)
	_, err = listServer(t.Context(), Config{OpenAICompatible: srv.URL + "/api", OpenAICompatibleWait: time.Minute}, testLog(t))
	if err == nil || !strings.Contains(err.Error(), "404") || n.Load() != 1 {
		t.Fatalf("404: %v after %d requests", err, n.Load())
	}
	// Nobody listening.
	addr := refused.Addr(t)
	_, err = listServer(t.Context(), Config{OpenAICompatible: "http://" + addr}, testLog(t))
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("refused: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := listServer(ctx, Config{OpenAICompatible: "http://" + addr, OpenAICompatibleWait: time.Hour}, testLog(t)); err == nil {
		t.Fatal("a cancelled start waits on")
	}
	if _, err := listServer(t.Context(), Config{OpenAICompatible: "localhost:8080"}, testLog(t)); err == nil || !strings.Contains(err.Error(), "http") {
		t.Fatalf("no scheme: %v", err)
	}
}

// TestCheck: what a worker refuses to start with, each with its reason.
func TestCheck(t *testing.T) {
	t.Parallel()
	srv, _ := modelsServer(t, 0, `{"data":[{"id":"qwen3"},{"id":"llama3.2:latest"},{"id":"tiny","max_model_len":8192}]}`)
	models := writeTemp(t, `{"providers":{"acme":{"baseUrl":"http://127.0.0.1:1/v1","api":"openai-completions","models":[{"id":"small","contextWindow":4096}]}}}`)
	cat, served, err := loadCatalog(t.Context(), Config{OpenAICompatible: srv.URL, ModelsFile: models}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	r := registry.NewResolver(registry.ResolverConfig{Env: func(string) string { return "" }, Catalog: cat, Served: served, Scripted: scripted.New(scripted.Config{})})
	for _, c := range []struct {
		ref  string
		want string // "" = accepted
	}{
		{"local/qwen3", ""},
		{"local/llama3.2", ""}, // Ollama's :latest
		{"scripted/echo", ""},
		{"anthropic/claude-sonnet-4-6", ""}, // keys may come from auth profiles
		{"local/gpt-oss", `does not list "gpt-oss"; it lists qwen3, llama3.2:latest, tiny`},
		{"local/tiny", "too small (8192 tokens)"},
		{"acme/small", "too small (4096 tokens)"},
		{"nosuch/model", "unknown provider"},
		{"noslash", "not provider/model-id"},
	} {
		err := r.Check(c.ref)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.ref, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.ref, err, c.want)
		}
	}
}

// TestOpenAIBaseURLHint: OPENAI_BASE_URL without an OpenAI key is not
// silently ignored: the worker says what it does and points to
// --openai-compatible.
func TestOpenAIBaseURLHint(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if h := openAIBaseURLHint(env(map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"})); !strings.Contains(h, "--openai-compatible") {
		t.Errorf("hint %q", h)
	}
	for _, m := range []map[string]string{nil, {"OPENAI_BASE_URL": "https://proxy/v1", "OPENAI_API_KEY": "sk"}} {
		if h := openAIBaseURLHint(env(m)); h != "" {
			t.Errorf("%v: hint %q", m, h)
		}
	}
}

func writeTemp(t *testing.T, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
