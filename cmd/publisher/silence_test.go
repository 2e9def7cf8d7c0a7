package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/runner"
)

// What following a run prints while it would otherwise print nothing: a
// provider's retries, a worker that stopped answering.

// chatSSE is a Chat Completions stream answering "Hi there".
const chatSSE = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi there"},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}

data: [DONE]

`

// unavailableFleet starts a worker whose only model (acme/m1, one key)
// is an endpoint answering its first fails requests 503 Service
// Unavailable, then "Hi there"; it retries twice, 20 ms apart at first.
func unavailableFleet(t *testing.T, fails int) string {
	t.Helper()
	var n atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if int(n.Add(1)) <= fails {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"Service Unavailable"}}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(chatSSE))
	}))
	t.Cleanup(api.Close)
	dir := t.TempDir()
	models, profiles := filepath.Join(dir, "models.json"), filepath.Join(dir, "auth-profiles.json")
	for path, data := range map[string]string{
		models:   fmt.Sprintf(`{"providers":{"acme":{"baseUrl":%q,"api":"openai-completions","models":[{"id":"m1","contextWindow":128000,"maxTokens":4096}]}}}`, api.URL+"/v1"),
		profiles: `{"version":1,"profiles":{"acme:a":{"type":"api_key","provider":"acme","key":"sk-acme-only"}}}`,
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srv := natstest.Start(t)
	m, err := fleet.Start(t.Context(), fleet.Config{NATSURL: srv.URL, ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
		NoBuiltinTools: true, NoRemoteTools: true, Env: func(string) string { return "" }, Logger: zerolog.Nop(),
		Retry: runner.RetryPolicy{MaxRetries: 2, BaseDelay: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv.URL
}

// TestSendShowsProviderRetries: a provider's 503 and the retry after it
// are lines of their own, naming a server error (it read "timeout"), and a
// run whose retries all failed ends with that error.
func TestSendShowsProviderRetries(t *testing.T) {
	t.Parallel()
	t.Run("one 503", func(t *testing.T) {
		t.Parallel()
		out, stderr, err := publisher(t, "send", "--nats-url", unavailableFleet(t, 1), "--session", "retry", "hello")
		if err != nil || out != "Hi there\n" {
			t.Fatalf("send: %q, %v\n%s", out, err, stderr)
		}
		want := "⏳ the model call failed: server error (HTTP 503): 503 Service Unavailable; retry 1 of 2 in 20ms\n" +
			"↻ retry 1 of 2: calling the model again\n"
		if stderr != want {
			t.Fatalf("stderr:\n%s\nwant\n%s", stderr, want)
		}
	})
	t.Run("503 on every call", func(t *testing.T) {
		t.Parallel()
		_, stderr, err := publisher(t, "send", "--nats-url", unavailableFleet(t, 100), "--session", "retry", "hello")
		for _, want := range []string{
			"retry 2 of 2 in 40ms\n",
			"↻ retry 2 of 2: calling the model again\n",
			"error (provider_error): server error (HTTP 503): 503 Service Unavailable\n",
		} {
			if err == nil || !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q (%v):\n%s", want, err, stderr)
			}
		}
		if strings.Contains(stderr, "timeout") {
			t.Errorf("a 503 called a timeout:\n%s", stderr)
		}
	})
}

// lineWriter is a buffer that signals when a line containing want was
// written.
type lineWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestFollowShowsHandOver: following a run whose worker stopped answering
// (its lease on the lane goes unrenewed) says so, naming the worker and
// within how long another takes the run over, instead of printing nothing
// until the next worker restarts it. The test plays both workers.
func TestFollowShowsHandOver(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	streams, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := kvstore.Open(ctx, js, kvstore.Config{LeaseTTL: 3 * time.Second}) // a short lease: it lapses 3 s after its last renewal
	if err != nil {
		t.Fatal(err)
	}
	svc, err := sessionsvc.Serve(nc, sessionsvc.Config{Lanes: l, Inbound: streams.Inbound, Events: streams.Events})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	const session, runID = "handed", "7"
	tok, _ := events.KeyToken(session)
	subj, _ := events.EventSubject(session, runID)
	pub := func(ev *events.Event) {
		t.Helper()
		ev.RunID, ev.SessionKey, ev.TS = runID, session, 1
		data, ct, err := events.EncodeEvent(ev, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: data, Header: nats.Header{events.HeaderContentType: []string{ct}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Worker w-dead started the run and stops renewing its lease.
	pub(&events.Event{Seq: 1, Attempt: 1, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseStart}})
	if _, err := l.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "w-dead", Acquired: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	notes := &lineWriter{want: "stopped", seen: make(chan struct{})}
	var out strings.Builder
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"follow", "--nats-url", srv.URL, "--session", session, "--run", runID}, &out, notes)
	}()
	select {
	case <-notes.seen:
	case err := <-done:
		t.Fatalf("follow ended before it said anything: %v\n%s", err, notes.String())
	}
	// Worker w-next takes the run over.
	pub(&events.Event{Seq: 2, Attempt: 2, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseAborted, Attempt: 1, Error: "the worker stopped"}})
	pub(&events.Event{Seq: 3, Attempt: 2, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseRestart, Worker: "w-next", Attempt: 2}})
	pub(&events.Event{Seq: 4, Attempt: 2, Stream: events.StreamFinal, Data: events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "Done."}}}}})
	if err := <-done; err != nil || out.String() != "Done.\n" {
		t.Fatalf("follow: %q, %v\n%s", out.String(), err, notes.String())
	}
	lines := strings.Split(strings.TrimSpace(notes.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "✗ attempt 1 aborted: the worker stopped") || lines[2] != "↻ restarted on worker w-next (attempt 2)" {
		t.Fatalf("stderr:\n%s", notes.String())
	}
	// The worker stopped answering (or, on a slow machine, its lease
	// lapsed already).
	if !strings.HasPrefix(lines[0], "… worker w-dead stopped answering (it no longer renews its lease on the session's lane): another worker takes run 7 over within ") &&
		lines[0] != "… the worker running run 7 stopped, and its lease on the session's lane lapsed: the run starts again when a worker takes the lane" {
		t.Fatalf("the hand-over reads %q", lines[0])
	}
}
