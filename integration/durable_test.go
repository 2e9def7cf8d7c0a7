package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// Issue 13: durable turns. A worker process is SIGKILLed in the middle of
// a turn that calls a tool; the next worker resumes the turn from its step
// journal: completed model calls are not made again, the tool that ran is
// not run again, and the transcript equals an uninterrupted run's.

// stepModel is an OpenAI-compatible server whose model calls the tool
// "charge" first, then answers "charged". Its model calls are counted per
// step (the tool results in the request); holdStep, when set, makes the
// first call of that step wait until the caller goes away, after saying
// so on held.
type stepModel struct {
	*httptest.Server
	mu       sync.Mutex
	calls    map[int]int
	holdStep int
	held     chan struct{}
}

func newStepModel(t *testing.T, holdStep int) *stepModel {
	t.Helper()
	m := &stepModel{calls: map[int]int{}, holdStep: holdStep, held: make(chan struct{})}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m1","object":"model","created":1,"owned_by":"test"}]}`))
			return
		}
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		step := 1
		for _, msg := range req.Messages {
			if msg.Role == "tool" {
				step++
			}
		}
		m.mu.Lock()
		m.calls[step]++
		first := m.calls[step] == 1
		m.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if step == m.holdStep && first {
			// Stream the start of the reply, then hold the call open until
			// the worker making it is killed.
			_, _ = w.Write([]byte(`data: {"id":"c0","object":"chat.completion.chunk","created":1,"model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":"thinking about it"},"finish_reason":null}]}` + "\n\n"))
			w.(http.Flusher).Flush()
			close(m.held)
			<-r.Context().Done()
			return
		}
		if step == 1 {
			_, _ = w.Write([]byte(sseToolCalls([2]string{"charge", `{"amount":5}`})))
			return
		}
		_, _ = w.Write([]byte(sseText("charged")))
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *stepModel) count(step int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[step]
}

// chargeTool counts its calls and the idempotency keys they carried.
type chargeTool struct {
	mu   sync.Mutex
	keys []string
}

func (c *chargeTool) Spec() provider.Tool {
	return provider.Tool{Name: "charge", Description: "Charge the card", Parameters: map[string]any{"type": "object",
		"properties": map[string]any{"amount": map[string]any{"type": "number"}}}}
}

func (c *chargeTool) Call(_ context.Context, call tools.Call) (tools.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = append(c.keys, call.Key)
	return tools.TextResult("charged 5"), nil
}

func (c *chargeTool) calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.keys...)
}

func TestDurableTurnSurvivesAKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	tests := []struct {
		name      string
		killAt    int // the model step whose call is held when the worker dies
		wantCalls map[int]int
	}{
		// The tool ran and its result was recorded; the worker dies in the
		// next model call, which alone is made again.
		{"killed after the tool ran", 2, map[int]int{1: 1, 2: 2}},
		// The worker dies in the first model call: that call is made
		// again, and nothing before it existed.
		{"killed during the first model stream", 1, map[int]int{1: 2, 2: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			model := newStepModel(t, tt.killAt)
			srv := natstest.Start(t)
			charge := &chargeTool{}
			svc, err := remote.Serve(natstest.Connect(t, srv.URL), remote.ServiceConfig{}, charge)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = svc.Stop() })
			args := []string{"--openai-compatible", model.URL, "--remote-tools", "charge", "--no-builtin-tools"}
			first := localWorker(t, srv.URL, nil, args...)
			first.waitReady(t)

			c, err := lanefleet.New(natstest.Connect(t, srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			run, err := c.Send(ctx, "durable", "charge my card 5")
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-model.held:
			case <-ctx.Done():
				t.Fatal("the model call to kill in was never made")
			}
			if err := first.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-first.exited
			second := localWorker(t, srv.URL, nil, args...)
			second.waitReady(t)

			var resumed, final *events.Event
			for ev, err := range run.Events(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				if ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseResumed {
					resumed = ev
				}
				if ev.Terminal() {
					final = ev
					break
				}
			}
			if final == nil || final.Data.Result == nil || len(final.Data.Result.Payloads) == 0 ||
				final.Data.Result.Payloads[len(final.Data.Result.Payloads)-1].Text != "charged" {
				t.Fatalf("final event %+v", final)
			}
			if keys := charge.calls(); len(keys) != 1 || keys[0] != run.ID+".1.call_0" {
				t.Fatalf("the tool was called %d times (keys %q); want once, with key %s.1.call_0", len(keys), keys, run.ID)
			}
			for step, want := range tt.wantCalls {
				if got := model.count(step); got != want {
					t.Errorf("model step %d called %d times, want %d", step, got, want)
				}
			}
			if tt.killAt == 2 && (resumed == nil || resumed.Data.Steps != 2) {
				t.Errorf("resumed event %+v; want one saying 2 steps (the reply and the tool's result) were replayed", resumed)
			}
			hist, err := c.History(ctx, "durable")
			if err != nil {
				t.Fatal(err)
			}
			var roles []string
			for _, e := range hist {
				if e.Message != nil {
					roles = append(roles, string(e.Message.Role))
				}
			}
			if got := strings.Join(roles, " "); got != "user assistant toolResult assistant" {
				t.Fatalf("transcript %q; want one user message, the tool call, its result and the answer", got)
			}
			var res *message.Message
			for _, e := range hist {
				if e.Message != nil && e.Message.Role == message.RoleToolResult {
					res = e.Message
				}
			}
			if res.IsError || res.Content.Text() != "charged 5" {
				t.Fatalf("tool result in the transcript %+v", res)
			}
		})
	}
}
