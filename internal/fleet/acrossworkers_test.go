package fleet

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// twoWorkers is a fleet of two workers that take a session's turns one
// after the other: w1 runs until the test calls handOver, which stops it
// and starts w2 with the same configuration but a data directory and a
// workspace root of its own. What w2 knows of w1's turns it has from the
// fleet alone: the session's transcript, and the agent workspace in the
// object store.
type twoWorkers struct {
	url  string
	cfg  Config
	c    *lanefleet.Client
	ctx  context.Context
	stop func()
}

// startTwoWorkers starts w1 of a two-worker fleet on a fresh server.
func startTwoWorkers(t *testing.T, cfg Config) *twoWorkers {
	t.Helper()
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	c, err := lanefleet.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	tw := &twoWorkers{url: srv.URL, cfg: cfg, c: c, ctx: ctx}
	tw.start(t, "w1")
	return tw
}

func (tw *twoWorkers) start(t *testing.T, id string) {
	t.Helper()
	cfg := tw.cfg
	cfg.NATSURL, cfg.WorkerID, cfg.DataDir, cfg.WorkspaceRoot = tw.url, id, t.TempDir(), t.TempDir()
	m, err := startMember(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	tw.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(tw.stop)
}

// handOver stops w1 and starts w2.
func (tw *twoWorkers) handOver(t *testing.T) {
	t.Helper()
	tw.stop()
	tw.start(t, "w2")
}

// turn runs one turn of session playing the scripted replies, checks
// that worker ran it and that it ended with the script's last text, and
// returns the session's tool results by call id.
func (tw *twoWorkers) turn(t *testing.T, worker, session string, replies ...scripted.Reply) map[string]string {
	t.Helper()
	v := watch(t, tw.ctx, tw.c, session, scriptText(t, replies...), lanefleet.WithModel("scripted/script"))
	want := replies[len(replies)-1].Text
	if v.runErr != nil || len(v.result.Payloads) == 0 || v.result.Payloads[0].Text != want {
		t.Fatalf("%s on %s: %+v, %v", session, worker, v.result, v.runErr)
	}
	if ran := strings.Join(v.texts, "\n"); !strings.Contains(ran, `"worker":"`+worker+`"`) {
		t.Fatalf("%s's turn did not run on %s:\n%s", session, worker, ran)
	}
	return toolResults(t, tw.ctx, tw.c, session)
}

// putAgent defines agent x, whose sessions agent:x:… share its
// workspace through the object store.
func (tw *twoWorkers) putAgent(t *testing.T) {
	t.Helper()
	if _, err := tw.c.PutAgent(tw.ctx, &agents.Agent{ID: "x"}); err != nil {
		t.Fatal(err)
	}
}

// TestToolsAcrossWorkers: each tool used in a session's turn on one
// worker, and again in the session's next turn on another worker, which
// has a workspace root and data directory of its own: the second turn
// works from what the first left in the fleet (the transcript, the agent
// workspace in the object store, the other session's lane).
func TestToolsAcrossWorkers(t *testing.T) {
	t.Parallel()

	t.Run("web_fetch", func(t *testing.T) {
		t.Parallel()
		mux := http.NewServeMux()
		for p, h1 := range map[string]string{"/install": "Install", "/upgrade": "Upgrade"} {
			mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprintf(w, "<title>Docs</title><h1>%s</h1><p>Run <code>make</code>.</p>", h1)
			})
		}
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		base := "http://localhost:" + u.Port()
		tw := startTwoWorkers(t, Config{DefaultModel: "scripted/echo", NoBuiltinTools: true, WebFetch: true, WebAllow: []string{"localhost"}})
		fetch := func(id, path string) scripted.Reply {
			return calls(id, "web_fetch", map[string]any{"url": base + path})
		}
		tw.turn(t, "w1", "web", fetch("f1", "/install"), scripted.Reply{Text: "fetched"})
		tw.handOver(t)
		res := tw.turn(t, "w2", "web", fetch("f2", "/upgrade"), scripted.Reply{Text: "fetched again"})
		if !strings.Contains(res["f1"], "# Install") || !strings.Contains(res["f2"], "# Upgrade") {
			t.Errorf("the fetches in the transcript: %q", res)
		}
	})

	t.Run("web_search", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var queries []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query().Get("q")
			mu.Lock()
			queries = append(queries, q)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"type":"search","web":{"type":"search","results":[{"title":"About %s","url":"https://example.com/%s","description":"All of %s."}]}}`, q, q, q)
		}))
		t.Cleanup(srv.Close)
		env := func(name string) string {
			if name == "BRAVE_API_KEY" {
				return "BSA-fleet-test-key-0123456789"
			}
			return ""
		}
		tw := startTwoWorkers(t, Config{DefaultModel: "scripted/echo", NoBuiltinTools: true, WebSearch: "brave", WebSearchURL: srv.URL, Env: env})
		tw.turn(t, "w1", "search", calls("s1", "web_search", map[string]any{"query": "lanefleet"}), scripted.Reply{Text: "searched"})
		tw.handOver(t)
		res := tw.turn(t, "w2", "search", calls("s2", "web_search", map[string]any{"query": "jetstream"}), scripted.Reply{Text: "searched again"})
		if !strings.Contains(res["s1"], "About lanefleet") || !strings.Contains(res["s2"], "About jetstream\n   https://example.com/jetstream") {
			t.Errorf("the searches in the transcript: %q", res)
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(queries, ",") != "lanefleet,jetstream" {
			t.Errorf("the search API was asked %q", queries)
		}
	})

	t.Run("apply_patch", func(t *testing.T) {
		t.Parallel()
		tw := startTwoWorkers(t, Config{DefaultModel: "scripted/echo", WorkspaceMaxBytes: -1})
		tw.putAgent(t)
		patch := func(id, p string) scripted.Reply {
			return calls(id, "apply_patch", map[string]any{"input": "*** Begin Patch\n" + p + "*** End Patch"})
		}
		res := tw.turn(t, "w1", "agent:x:code", patch("p1", "*** Add File: memory/notes.md\n+# Notes\n+- tea\n"), scripted.Reply{Text: "added"})
		if res["p1"] != "Success. Updated the following files:\nA memory/notes.md" {
			t.Fatalf("the patch on w1: %q", res["p1"])
		}
		tw.handOver(t)
		res = tw.turn(t, "w2", "agent:x:code", patch("p2", "*** Update File: memory/notes.md\n@@ # Notes\n-- tea\n+- coffee\n"), scripted.Reply{Text: "updated"})
		if res["p2"] != "Success. Updated the following files:\nM memory/notes.md" {
			t.Fatalf("the patch on w2 of w1's file: %q", res["p2"])
		}
		if b, err := tw.c.AgentFile(tw.ctx, "x", "memory/notes.md"); err != nil || string(b) != "# Notes\n- coffee\n" {
			t.Errorf("memory/notes.md in the object store: %q, %v", b, err)
		}
	})

	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		tw := startTwoWorkers(t, Config{DefaultModel: "scripted/echo", MemoryTools: true, WorkspaceMaxBytes: -1})
		tw.putAgent(t)
		tw.turn(t, "w1", "agent:x:mem",
			calls("w", "write", map[string]any{"path": "memory/2026-11-29.md", "content": "# Decisions\nWe chose Postgres for the ledger.\n"}),
			calls("s1", "memory_search", map[string]any{"query": "postgres"}),
			scripted.Reply{Text: "remembered"})
		tw.handOver(t)
		res := tw.turn(t, "w2", "agent:x:mem",
			calls("s2", "memory_search", map[string]any{"query": "which database: postgres?"}),
			calls("g", "memory_get", map[string]any{"path": "memory/2026-11-29.md", "from": 2, "lines": 1}),
			scripted.Reply{Text: "recalled"})
		for _, id := range []string{"s1", "s2"} {
			if !strings.HasPrefix(res[id], "memory/2026-11-29.md:1-2 (score ") || !strings.Contains(res[id], "We chose Postgres") {
				t.Errorf("%s: %q", id, res[id])
			}
		}
		if !strings.HasPrefix(res["g"], "We chose Postgres for the ledger.") {
			t.Errorf("memory_get on w2: %q", res["g"])
		}
	})

	t.Run("sessions", func(t *testing.T) {
		t.Parallel()
		tw := startTwoWorkers(t, Config{DefaultModel: "scripted/echo", NoBuiltinTools: true, SessionTools: "tenant", SessionSender: clientSender})
		res := tw.turn(t, "w1", "acme:a", calls("s1", "sessions_send", map[string]any{"sessionKey": "acme:b", "message": "status please"}), scripted.Reply{Text: "sent"})
		if !strings.HasPrefix(res["s1"], "Sent to acme:b (run ") {
			t.Fatalf("send on w1: %q", res["s1"])
		}
		// A lane runs in order: once this has run, the sent message has.
		if v := watch(t, tw.ctx, tw.c, "acme:b", "after"); v.runErr != nil {
			t.Fatal(v.runErr)
		}
		tw.handOver(t)
		res = tw.turn(t, "w2", "acme:a",
			calls("l", "sessions_list", nil),
			calls("h", "sessions_history", map[string]any{"sessionKey": "acme:b"}),
			calls("s2", "sessions_send", map[string]any{"sessionKey": "acme:b", "message": "and now?"}),
			scripted.Reply{Text: "followed up"})
		if !strings.Contains(res["l"], "acme:b  idle") || !strings.Contains(res["l"], "(this session)") {
			t.Errorf("list on w2: %q", res["l"])
		}
		if !strings.Contains(res["h"], "[Message from session acme:a, sent with sessions_send]") || !strings.Contains(res["h"], "assistant: echo: [Message from session acme:a") {
			t.Errorf("history on w2 of the message sent from w1: %q", res["h"])
		}
		if !strings.HasPrefix(res["s2"], "Sent to acme:b (run ") {
			t.Errorf("send on w2: %q", res["s2"])
		}
		if v := watch(t, tw.ctx, tw.c, "acme:b", "after again"); v.runErr != nil {
			t.Fatal(v.runErr)
		}
		h := strings.Join(historyTexts(t, tw.ctx, tw.c, "acme:b"), "\n")
		if n := strings.Count(h, `assistant: "echo: [Message from session acme:a`); n != 2 {
			t.Errorf("acme:b answered %d messages from acme:a, want 2 (one from each worker):\n%s", n, h)
		}
	})
}
