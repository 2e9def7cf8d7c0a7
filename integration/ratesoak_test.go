package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
)

// limitServer is a Chat Completions endpoint with a provider's rate limit:
// it answers 429 (with retry-after) to a request that arrives when rpm
// requests were answered in the 60 s before it. It records every
// request's arrival.
type limitServer struct {
	*httptest.Server
	rpm int

	mu       sync.Mutex
	arrivals []time.Time    // every request's
	auth     []string       // every request's Authorization
	prompts  map[string]int // requests by the last user message's text
	answered []time.Time    // the requests answered 200
	rejected int
}

func newLimitServer(t *testing.T, rpm int) *limitServer {
	t.Helper()
	ls := &limitServer{rpm: rpm, prompts: map[string]int{}}
	ls.Server = httptest.NewServer(http.HandlerFunc(ls.serve))
	t.Cleanup(ls.Close)
	return ls
}

func (ls *limitServer) serve(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body)
	prompt := ""
	for _, m := range body.Messages {
		if m.Role == "user" {
			prompt = fmt.Sprint(m.Content)
		}
	}
	ls.mu.Lock()
	ls.prompts[prompt]++
	ls.arrivals = append(ls.arrivals, now)
	ls.auth = append(ls.auth, r.Header.Get("Authorization"))
	i, _ := slices.BinarySearchFunc(ls.answered, now.Add(-time.Minute), func(a, b time.Time) int { return a.Compare(b) })
	if inWindow := ls.answered[i:]; len(inWindow) >= ls.rpm {
		ls.rejected++
		wait := inWindow[0].Add(time.Minute).Sub(now)
		ls.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"message":"Rate limit reached for requests per minute","type":"requests","code":"rate_limit_exceeded"}}`))
		return
	}
	ls.answered = append(ls.answered, now)
	ls.mu.Unlock()
	chunk, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m1",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": nil}}})
	done := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	usage := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m1","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":1,"total_tokens":21}}`
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = fmt.Fprintf(w, "data: %s\n\ndata: %s\n\ndata: %s\n\ndata: [DONE]\n\n", chunk, done, usage)
}

// keys are the requests' Authorization headers, in order.
func (ls *limitServer) keys() []string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return slices.Clone(ls.auth)
}

// stats are the requests the server saw, the 429s it answered, the most
// requests that arrived in any 60 s span, and the prompts sent more than
// once.
func (ls *limitServer) stats() (requests, rejected, busiestMinute, repeated int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, n := range ls.prompts {
		if n > 1 {
			repeated++
		}
	}
	for i, j := 0, 0; j < len(ls.arrivals); j++ {
		for ls.arrivals[j].Sub(ls.arrivals[i]) >= time.Minute {
			i++
		}
		busiestMinute = max(busiestMinute, j-i+1)
	}
	return len(ls.arrivals), ls.rejected, busiestMinute, repeated
}

// TestRateLimitSoak (make rate-soak; skipped unless LANEFLEET_RATE_SOAK
// names a duration): three workers in front of a provider that answers 429
// above LANEFLEET_RATE_SOAK_RPM requests a minute (default 120), first
// without --rate-limit for a fifth of the run (or a minute at most),
// then with 'acme/*=rpm:N'. Both phases offer three times the limit (one
// session per message, sent at an even pace): the first for a third of
// the run or a minute, the limited one for a third of the run, so it
// keeps the provider at its limit for the whole run as it drains. With
// the limit the provider sees no 429 and no 60 s span of more than N
// requests; every turn of both phases ends.
func TestRateLimitSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("LANEFLEET_RATE_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("LANEFLEET_RATE_SOAK=10m runs it (make rate-soak)")
	}
	rpm := 120
	if v := os.Getenv("LANEFLEET_RATE_SOAK_RPM"); v != "" {
		if rpm, err = strconv.Atoi(v); err != nil || rpm <= 0 {
			t.Fatalf("LANEFLEET_RATE_SOAK_RPM=%q", v)
		}
	}
	without := rateSoakPhase(t, "without the limit", min(d/3, time.Minute), rpm, false)
	with := rateSoakPhase(t, "with --rate-limit", d/3, rpm, true)
	t.Logf("RATE SOAK without the limit: %s", without)
	t.Logf("RATE SOAK with the limit: %s", with)
}

// rateSoakResult is one phase's figures.
type rateSoakResult struct {
	sent, answered, failed                         int
	requests, rejected, busiest, limited, repeated int
	took                                           time.Duration
}

func (r rateSoakResult) String() string {
	return fmt.Sprintf("%d turns sent, %d answered, %d ended in error, in %s; provider: %d requests (%d turns' prompt sent more than once), %d answered 429, busiest 60 s span %d requests (limit %d)",
		r.sent, r.answered, r.failed, r.took.Round(time.Second), r.requests, r.repeated, r.rejected, r.busiest, r.limited)
}

// rateSoakPhase offers three times rpm for sendFor to a fresh fleet and
// provider, and waits for every turn to end.
func rateSoakPhase(t *testing.T, name string, sendFor time.Duration, rpm int, limit bool) rateSoakResult {
	t.Helper()
	ls := newLimitServer(t, rpm)
	dir := t.TempDir()
	models := filepath.Join(dir, "models.json")
	m := fmt.Sprintf(`{"providers":{"acme":{"baseUrl":%q,"api":"openai-completions","models":[{"id":"m1","contextWindow":128000,"maxTokens":64}]}}}`, ls.URL+"/v1")
	if err := os.WriteFile(models, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(dir, "auth-profiles.json")
	if err := os.WriteFile(profiles, []byte(`{"version":1,"profiles":{"acme:a":{"type":"api_key","provider":"acme","key":"sk-acme-a"}},"order":{"acme":["acme:a"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var rules []governance.RateRule
	if limit {
		r, err := governance.ParseRateRule(fmt.Sprintf("acme/*=rpm:%d", rpm))
		if err != nil {
			t.Fatal(err)
		}
		rules = []governance.RateRule{r}
	}
	srv := natstest.Start(t)
	for i := range 3 {
		startMember(t, srv.URL, fleet.Config{WorkerID: fmt.Sprintf("w%d", i+1), ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
			NoBuiltinTools: true, Env: envMap(nil), Concurrency: 256, AttemptTimeout: 12 * sendFor, RateLimits: rules,
			// The fleet's defaults, not the harness's 5 s: hundreds of
			// turns wait in admission for minutes, each renewing its lease.
			LeaseTTL: kvstore.DefaultLeaseTTL, AckWait: lanes.DefaultAckWait})
	}
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 12*sendFor+5*time.Minute)
	defer cancel()
	n := int(3 * float64(rpm) * sendFor.Minutes())
	every := sendFor / time.Duration(n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	res := rateSoakResult{sent: n, limited: rpm}
	start := time.Now()
	tick := time.NewTicker(every)
	for i := range n {
		if i > 0 {
			<-tick.C
		}
		r, err := c.Send(ctx, fmt.Sprintf("acme:%s:%d", name[:4], i), fmt.Sprintf("go %d", i))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			out, err := r.Wait(ctx)
			var re *lanefleet.RunError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.As(err, &re):
				res.failed++
			case err != nil:
				t.Errorf("%s: turn %d did not end: %v", name, i, err)
			case len(out.Payloads) > 0:
				res.answered++
			}
		})
	}
	tick.Stop()
	wg.Wait()
	res.took = time.Since(start)
	res.requests, res.rejected, res.busiest, res.repeated = ls.stats()
	t.Logf("%s: %s", name, res)
	if res.answered+res.failed != n {
		t.Errorf("%s: %d of %d turns ended", name, res.answered+res.failed, n)
	}
	if limit && (res.rejected != 0 || res.busiest > rpm || res.failed != 0) {
		t.Errorf("%s: %s; want no 429, no 60 s span over %d, every turn answered", name, res, rpm)
	}
	return res
}
