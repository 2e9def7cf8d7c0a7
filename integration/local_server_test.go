package integration

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// Issue 19 item 3: a local OpenAI-compatible server (llama.cpp's
// llama-server, vLLM, Ollama, LM Studio) in one flag, through a worker
// process started as an operator would (no --scripted).

// localServer is a Chat Completions server as llama-server, vLLM or LM
// Studio run it: GET /v1/models lists its models, POST
// /v1/chat/completions streams a reply naming the model asked for. With a
// key, both want it.
type localServer struct {
	*httptest.Server
	mu    sync.Mutex
	calls []localCall
}

type localCall struct {
	path, model, auth string
}

func newLocalServer(t *testing.T, key string, ids ...string) *localServer {
	t.Helper()
	ls := &localServer{}
	ls.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		if r.Method == http.MethodPost {
			_ = json.NewDecoder(r.Body).Decode(&req)
		}
		ls.mu.Lock()
		ls.calls = append(ls.calls, localCall{path: r.URL.Path, model: req.Model, auth: r.Header.Get("Authorization")})
		ls.mu.Unlock()
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":{"message":"Invalid API Key","type":"authentication_error"}}`, http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
			data := make([]map[string]any, len(ids))
			for i, id := range ids {
				data[i] = map[string]any{"id": id, "object": "model", "created": 1, "owned_by": "llamacpp"}
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
		case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(sseText("hello from " + req.Model)))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ls.Close)
	return ls
}

func (ls *localServer) seen() []localCall {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return append([]localCall(nil), ls.calls...)
}

// localWorker runs cmd/worker joined to natsURL with a clean environment
// (PATH and HOME only, plus env) and exactly args: no test models.
func localWorker(t *testing.T, natsURL string, env []string, args ...string) *proc {
	t.Helper()
	// Copies of the agent workspaces of its own, removed with the test.
	args = append([]string{"--log-format", "json", "--log-level", "info", "--shutdown-grace", "2s", "--ack-wait", "2s", "--lease-ttl", "2s",
		"--agent-cache-dir", t.TempDir()}, args...)
	p := &proc{cmd: exec.Command(workerBinary(t), args...), logs: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NATS_URL=" + natsURL}, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("worker output:\n%s", p.logs.String())
		}
	})
	return p
}

// TestOpenAICompatibleOneFlag: --openai-compatible URL alone serves the
// server's models keylessly; the default model is its first chat model
// (LM Studio lists an embedding model first); the server sees that model
// name and no key.
func TestOpenAICompatibleOneFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	ls := newLocalServer(t, "", "text-embedding-nomic-embed-text-v1.5", "qwen3-8b")
	srv := natstest.Start(t)
	w := localWorker(t, srv.URL, nil, "--openai-compatible", ls.URL, "--no-builtin-tools")
	w.waitReady(t)
	if out := w.logs.String(); !strings.Contains(out, `"model":"local/qwen3-8b"`) {
		t.Fatalf("ready without the server's first chat model as default:\n%s", out)
	}
	c, err := lanefleet.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := waitResult(t, ctx, c, "local-alice", "hi")
	if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text != "hello from qwen3-8b" {
		t.Fatalf("reply %+v, %v", res, err)
	}
	calls := ls.seen()
	if len(calls) != 2 || calls[0].path != "/v1/models" || calls[1].path != "/v1/chat/completions" || calls[1].model != "qwen3-8b" {
		t.Errorf("the server saw %+v; want the listing, then one chat completion for qwen3-8b", calls)
	}
	for _, call := range calls {
		if call.auth != "" {
			t.Errorf("%s sent authorization %q to a keyless server", call.path, call.auth)
		}
	}
}

// TestOpenAICompatibleKey: OPENAI_COMPATIBLE_BASE_URL (a bare origin) and
// OPENAI_COMPATIBLE_API_KEY reach a server that wants a key, on the
// listing and on every turn, and the key never shows in the worker's
// output; without it the worker does not start, saying the server wants
// a key.
func TestOpenAICompatibleKey(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	const key = "sk-local-0123456789abcdef"
	ls := newLocalServer(t, key, "Qwen/Qwen3-8B")
	srv := natstest.Start(t)

	w := localWorker(t, srv.URL, []string{"OPENAI_COMPATIBLE_BASE_URL=" + ls.URL})
	if err := w.wait(t); err == nil || !strings.Contains(w.logs.String(), "401") || !strings.Contains(w.logs.String(), "wants an API key") {
		t.Fatalf("without the key: %v\n%s", err, w.logs.String())
	}

	w = localWorker(t, srv.URL, []string{"OPENAI_COMPATIBLE_BASE_URL=" + ls.URL, "OPENAI_COMPATIBLE_API_KEY=" + key}, "--no-builtin-tools")
	w.waitReady(t)
	c, err := lanefleet.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := waitResult(t, ctx, c, "local-bob", "hi", lanefleet.WithModel("local/Qwen/Qwen3-8B"))
	if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text != "hello from Qwen/Qwen3-8B" {
		t.Fatalf("reply %+v, %v", res, err)
	}
	calls := ls.seen()
	if n := len(calls); n < 3 || calls[n-1].auth != "Bearer "+key || calls[n-2].auth != "Bearer "+key {
		t.Errorf("calls %+v; want the key on the listing and the turn", calls)
	}
	if strings.Contains(w.logs.String(), key) {
		t.Error("the key is in the worker's output")
	}
}

// TestOpenAICompatibleDown: a server that does not answer at start stops
// the worker with the reason; it never says ready.
func TestOpenAICompatibleDown(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	srv := natstest.Start(t)
	w := localWorker(t, srv.URL, nil, "--openai-compatible", down)
	err = w.wait(t)
	out := w.logs.String()
	if err == nil || !strings.Contains(out, "connection refused") || !strings.Contains(out, down+"/v1/models") || strings.Contains(out, `"message":"ready"`) {
		t.Fatalf("server down: exit %v\n%s", err, out)
	}
}

// TestOpenAIBaseURLWithoutKey: OPENAI_BASE_URL without a key is not
// silently ignored: the worker that has no model says why and points to
// --openai-compatible.
func TestOpenAIBaseURLWithoutKey(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	w := localWorker(t, srv.URL, []string{"OPENAI_BASE_URL=http://127.0.0.1:8080/v1"})
	if err := w.wait(t); err == nil || !strings.Contains(w.logs.String(), "OPENAI_BASE_URL is set without OPENAI_API_KEY") ||
		!strings.Contains(w.logs.String(), "--openai-compatible") {
		t.Fatalf("exit %v\n%s", err, w.logs.String())
	}
}
