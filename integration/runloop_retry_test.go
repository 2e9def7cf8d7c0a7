package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/runner"
)

// flakyServer is a Chat Completions endpoint that fails its first requests
// with the given statuses, headers and bodies, then answers with the
// recorded SSE reply. It counts the requests.
type flakyServer struct {
	*httptest.Server
	mu sync.Mutex
	n  int
}

type failure struct {
	status     int
	retryAfter string
	body       string
}

func newFlakyServer(t *testing.T, fails ...failure) *flakyServer {
	t.Helper()
	okBody, err := os.ReadFile("testdata/openai-completions-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	fs := &flakyServer{}
	fs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fs.mu.Lock()
		n := fs.n
		fs.n++
		fs.mu.Unlock()
		if n < len(fails) {
			f := fails[n]
			w.Header().Set("Content-Type", "application/json")
			if f.retryAfter != "" {
				w.Header().Set("Retry-After", f.retryAfter)
			}
			w.WriteHeader(f.status)
			_, _ = w.Write([]byte(f.body))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(okBody)
	}))
	t.Cleanup(fs.Close)
	return fs
}

func (fs *flakyServer) requests() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.n
}

// oneKeyFiles writes a models file for provider acme (Chat Completions at
// url) and an auth-profiles.json with the one profile acme:a.
func oneKeyFiles(t *testing.T, url string) (models, profiles string) {
	t.Helper()
	dir := t.TempDir()
	models = filepath.Join(dir, "models.json")
	profiles = filepath.Join(dir, "auth-profiles.json")
	m := fmt.Sprintf(`{"providers":{"acme":{"baseUrl":%q,"api":"openai-completions","models":[{"id":"m1","contextWindow":128000,"maxTokens":4096}]}}}`, url+"/v1")
	p := `{"version":1,"profiles":{"acme:a":{"type":"api_key","provider":"acme","key":"sk-acme-only"}}}`
	for path, data := range map[string]string{models: m, profiles: p} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return models, profiles
}

// follow sends one message of session, reads its events to the end and
// returns its lifecycle retrying events and its result.
func follow(ctx context.Context, t *testing.T, c *lanefleet.Client, session, text string) ([]*events.Event, *events.Result) {
	t.Helper()
	run, err := c.Send(ctx, session, text)
	if err != nil {
		t.Fatal(err)
	}
	var waits []*events.Event
	for ev, err := range run.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseRetrying {
			waits = append(waits, ev)
		}
		if ev.Terminal() {
			return waits, ev.Data.Result
		}
	}
	t.Fatal("the run's events ended without a final event")
	return nil, nil
}

// TestOverloadedProviderRetriedOnTheSameKey: a 529 from the provider is
// retried on the same (only) key after pi's 2 s backoff, inside the same
// run, and the wait is an event a viewer can show.
func TestOverloadedProviderRetriedOnTheSameKey(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ps := newFlakyServer(t, failure{status: 529, body: `{"error":{"message":"Overloaded","type":"overloaded_error"}}`})
	models, profiles := oneKeyFiles(t, ps.URL)
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
		NoBuiltinTools: true, NoRemoteTools: true, Env: func(string) string { return "" }})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	waits, res := follow(ctx, t, c, "retry:1", "hello")
	if res == nil || res.Meta.Error != nil || len(res.Payloads) == 0 || res.Payloads[0].Text == "" {
		t.Fatalf("result %+v", res)
	}
	if len(waits) != 1 || waits[0].Data.Attempt != 1 || waits[0].Data.DelayMs != runner.RetryBaseDelayDefault.Milliseconds() ||
		!strings.Contains(waits[0].Data.Error, "Overloaded") {
		t.Fatalf("retrying events %+v: want one, attempt 1 after 2000 ms, saying why", waits)
	}
	if n := ps.requests(); n != 2 {
		t.Fatalf("%d provider requests, want the failed one and its retry", n)
	}
}

// TestSingleKeyFleetAfterRateLimit: after a 429 with Retry-After 1 s on the
// fleet's only key (no same-key retries, so the run ends with the rate
// limit), the next run is not refused by the key's cooldown: it waits out
// the rest of the Retry-After and is answered.
func TestSingleKeyFleetAfterRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	limited, err := os.ReadFile("testdata/openai-completions-429-rate-limit.json")
	if err != nil {
		t.Fatal(err)
	}
	ps := newFlakyServer(t, failure{status: 429, retryAfter: "1", body: string(limited)})
	models, profiles := oneKeyFiles(t, ps.URL)
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
		NoBuiltinTools: true, NoRemoteTools: true, Env: func(string) string { return "" }, Retry: runner.RetryPolicy{MaxRetries: -1}})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	_, res := follow(ctx, t, c, "single:1", "hello")
	if res == nil || res.Meta.Error == nil || !strings.Contains(strings.ToLower(res.Payloads[0].Text), "rate limit") {
		t.Fatalf("first run %+v: want the rate-limit reply", res)
	}
	waits, res := follow(ctx, t, c, "single:1", "hello again")
	if res == nil || res.Meta.Error != nil || len(res.Payloads) == 0 || res.Payloads[0].Text == "" {
		t.Fatalf("second run %+v: want an answer, not a refusal", res)
	}
	if n := ps.requests(); n != 2 {
		t.Fatalf("%d provider requests, want 2", n)
	}
	// The second run either waited for the rest of the Retry-After (and
	// said so) or started after it had passed.
	if len(waits) > 1 || (len(waits) == 1 && (waits[0].Data.Attempt != 0 || waits[0].Data.DelayMs <= 0 || waits[0].Data.DelayMs > 1000)) {
		t.Fatalf("retrying events %+v: want at most one cooldown wait within the 1 s Retry-After", waits)
	}
}
