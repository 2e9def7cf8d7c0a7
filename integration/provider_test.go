package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestRealProviderThroughTheFleet: a worker whose environment points the
// OpenRouter provider (OpenAI Chat Completions adapter) at a local server
// replaying a recorded Chat Completions SSE response runs the turn through the real adapter: request with the key and
// the history, streamed reply, usage, transcript. A 429 from the same server
// ends the next turn with a rate-limit error the client can read.
func TestRealProviderThroughTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	okBody, err := os.ReadFile("testdata/openai-completions-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	limited, err := os.ReadFile("testdata/openai-completions-429-rate-limit.json")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var requests []map[string]any
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		requests = append(requests, req)
		auth = append(auth, r.Header.Get("Authorization"))
		n := len(requests)
		mu.Unlock()
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			t.Logf("unexpected path %s", r.URL.Path)
			http.NotFound(w, r)
			return
		}
		if n > 1 {
			w.Header().Set("Content-Type", "application/json")
			// Longer than a minute: not waited for on the same key, so the
			// turn ends with the rate limit at once.
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write(limited)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(okBody)
	}))
	defer srv.Close()

	env := map[string]string{"OPENROUTER_API_KEY": "sk-test-not-a-real-key", "OPENROUTER_BASE_URL": srv.URL + "/v1"}
	nats := natstest.Start(t)
	startMember(t, nats.URL, fleet.Config{WorkerID: "real", Env: envMap(env)})
	nc := natstest.Connect(t, nats.URL)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	run, err := c.Send(ctx, "real:1", "say hello in Portuguese", lanefleet.WithModel("openrouter/openai/gpt-5"))
	if err != nil {
		t.Fatal(err)
	}
	var streamed string
	var final *events.Result
	for ev, err := range run.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == "assistant" {
			streamed += ev.Data.Delta
		}
		if ev.Terminal() {
			final = ev.Data.Result
		}
	}
	if final == nil || final.Meta.Error != nil || len(final.Payloads) != 1 || final.Payloads[0].Text != streamed || streamed == "" {
		t.Fatalf("streamed %q, final %+v", streamed, final)
	}
	if am := final.Meta.AgentMeta; am.Provider != "openrouter" || am.Model == "" || am.Usage == nil {
		t.Fatalf("agent meta = %+v", am)
	}
	mu.Lock()
	if auth[0] != "Bearer sk-test-not-a-real-key" || requests[0]["model"] != "openai/gpt-5" || requests[0]["stream"] != true {
		t.Fatalf("request: auth %q body %v", auth[0], requests[0])
	}
	mu.Unlock()

	// The second turn hits the rate limit: a finished run with the error.
	run, err = c.Send(ctx, "real:1", "again", lanefleet.WithModel("openrouter/openai/gpt-5"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait(ctx)
	var re *lanefleet.RunError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "rate_limit") {
		t.Fatalf("second turn: %+v, %v", res, err)
	}
	mu.Lock()
	msgs, _ := requests[1]["messages"].([]any)
	mu.Unlock()
	if len(msgs) < 3 {
		t.Fatalf("second request carried %d messages, want the first turn's history too", len(msgs))
	}
	hist, err := c.History(ctx, "real:1")
	if err != nil || len(hist) != 4 {
		t.Fatalf("history: %d entries, %v", len(hist), err)
	}
	if hist[3].Message.StopReason != "error" {
		t.Fatalf("failed turn stored as %+v", hist[3].Message)
	}
}
