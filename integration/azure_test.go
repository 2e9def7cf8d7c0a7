package integration

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestAzureThrottleRotatesProfile: an Azure OpenAI deployment on a fleet
// whose two auth profiles hold their keys by reference, one in a file,
// one in an environment variable. Azure throttles the first key (429 with
// retry-after), so the run rotates to the second and the reply streams
// from it; both calls reach the deployment's URL with the key read from
// its reference in the api-key header.
func TestAzureThrottleRotatesProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	const keyA, keyB = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	var mu sync.Mutex
	var keys, paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		keys, paths = append(keys, r.Header.Get("api-key")), append(paths, r.URL.Path)
		mu.Unlock()
		if r.Header.Get("api-key") == keyA {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("retry-after", "6")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2025-04-01-preview have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds."}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}`+"\n\n"+
			`data: {"choices":[{"content_filter_results":{},"delta":{"content":"Hello from Azure."},"finish_reason":null,"index":0}],"object":"chat.completion.chunk"}`+"\n\n"+
			`data: {"choices":[{"content_filter_results":{},"delta":{},"finish_reason":"stop","index":0}],"object":"chat.completion.chunk","usage":{"prompt_tokens":30,"completion_tokens":4,"total_tokens":34}}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key-a")
	if err := os.WriteFile(keyFile, []byte(keyA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(dir, "auth-profiles.json")
	p := `{"version":1,"profiles":{"azure:a":{"type":"api_key","provider":"azure","keyRef":"file:` + keyFile + `"},` +
		`"azure:b":{"type":"api_key","provider":"azure","keyRef":"env:TEAM_AZURE_KEY"}},"order":{"azure":["azure:a","azure:b"]}}`
	if err := os.WriteFile(profiles, []byte(p), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"AZURE_OPENAI_ENDPOINT": srv.URL, "TEAM_AZURE_KEY": keyB}
	nats := natstest.Start(t)
	startMember(t, nats.URL, fleet.Config{WorkerID: "w1", AuthProfiles: profiles, DefaultModel: "azure/gpt-5-mini", Env: envMap(env)})
	c, _ := lanefleet.New(natstest.Connect(t, nats.URL))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := c.Send(ctx, "azure:1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait(ctx)
	if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text != "Hello from Azure." {
		t.Fatalf("run: %+v, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] != keyA || keys[1] != keyB {
		t.Fatalf("%d calls, keys %v: want one with A then one with B", len(keys), len(keys))
	}
	for _, p := range paths {
		if p != "/openai/deployments/gpt-5-mini/chat/completions" {
			t.Errorf("call to %s", p)
		}
	}
}
