package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// flushModel is an OpenAI-compatible server for a turn whose context is
// over the compaction threshold: the memory flush's first call edits
// MEMORY.md, its second is held open (the first time) until the worker
// making it goes away, then answers NO_REPLY; a summary call answers a
// summary, any other call "done". It counts each kind of call.
type flushModel struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int
	held  chan struct{}
}

func newFlushModel(t *testing.T) *flushModel {
	t.Helper()
	m := &flushModel{calls: map[string]int{}, held: make(chan struct{})}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		system, last := string(req.Messages[0].Content), req.Messages[len(req.Messages)-1].Role
		kind := "answer"
		switch {
		case strings.Contains(system, "context summarization assistant"):
			kind = "summary"
		case strings.Contains(system, "Pre-compaction memory flush") && last == "user":
			kind = "flush-1"
		case strings.Contains(system, "Pre-compaction memory flush"):
			kind = "flush-2"
		}
		m.mu.Lock()
		m.calls[kind]++
		n := m.calls[kind]
		m.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch {
		case kind == "flush-1":
			_, _ = w.Write([]byte(sseToolCalls([2]string{"edit", `{"path":"MEMORY.md","oldText":"facts:","newText":"facts:\n- the user likes tea"}`})))
		case kind == "flush-2" && n == 1:
			w.(http.Flusher).Flush()
			close(m.held)
			<-r.Context().Done()
		case kind == "flush-2":
			_, _ = w.Write([]byte(sseText("NO_REPLY")))
		case kind == "summary":
			_, _ = w.Write([]byte(sseText("## Goal\nTalk about tea.")))
		default:
			_, _ = w.Write([]byte(sseText("done")))
		}
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *flushModel) count(kind string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[kind]
}

// TestMemoryFlushSurvivesAKilledWorker: a turn over the compaction
// threshold starts with the memory flush, whose edit of the agent's
// MEMORY.md goes back to the object store before its result is
// journaled; the worker is SIGKILLed in the flush's next model call. The
// next worker (another process, another workspace root) replays the
// flush from the journal: the flush's first model call and its edit are
// not made again (MEMORY.md has the fact once, not twice), and the turn
// ends as it would have.
func TestMemoryFlushSurvivesAKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	model := newFlushModel(t)
	// A 20,000-token window: a context over 3,616 tokens (the window less
	// pi's 16,384-token reserve) is compacted first.
	models, profiles := acmeFiles(t, model.URL, 20000)
	srv := natstest.Start(t)
	c, err := lanefleet.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := c.PutAgent(ctx, &agents.Agent{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutAgentFile(ctx, "x", "MEMORY.md", []byte("facts:")); err != nil {
		t.Fatal(err)
	}
	worker := func(id string) *proc {
		p := localWorker(t, srv.URL, nil, "--id", id, "--models-file", models, "--auth-profiles", profiles, "--model", "acme/m1",
			"--memory-tools", "--workspace-root", filepath.Join(t.TempDir(), "ws"))
		p.waitReady(t)
		return p
	}
	first := worker("a")
	run, err := c.Send(ctx, "agent:x:tea", "remember this: "+strings.Repeat("tea is good. ", 2000))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-model.held:
	case <-ctx.Done():
		t.Fatal("the flush's second model call was never made")
	}
	// The edit went back to the workspace before its result was recorded.
	if b, err := c.AgentFile(ctx, "x", "MEMORY.md"); err != nil || string(b) != "facts:\n- the user likes tea" {
		t.Fatalf("MEMORY.md in the object store while the flush goes on: %q, %v", b, err)
	}
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	worker("b")
	res, err := run.Wait(ctx)
	if err != nil || len(res.Payloads) == 0 || res.Payloads[len(res.Payloads)-1].Text != "done" {
		t.Fatalf("the turn: %+v, %v", res, err)
	}
	if n := model.count("flush-1"); n != 1 {
		t.Errorf("the flush's first model call was made %d times, want once (replayed on worker b)", n)
	}
	if n := model.count("flush-2"); n != 2 {
		t.Errorf("the flush's second model call was made %d times, want twice (held on a, made again on b)", n)
	}
	if b, err := c.AgentFile(ctx, "x", "MEMORY.md"); err != nil || string(b) != "facts:\n- the user likes tea" {
		t.Errorf("MEMORY.md after the turn: %q, %v; the edit must have run once", b, err)
	}
	hist, err := c.History(ctx, "agent:x:tea")
	if err != nil {
		t.Fatal(err)
	}
	flushes := 0
	for _, e := range hist {
		if e.Type == "custom" && e.Field("customType") == "memory-flush" {
			flushes++
		}
		if e.Message != nil && strings.Contains(e.Message.Content.Text(), "NO_REPLY") {
			t.Errorf("the flush's reply entered the transcript: %+v", e.Message)
		}
	}
	if flushes != 1 {
		t.Errorf("%d memory-flush records in the transcript, want 1", flushes)
	}
}
