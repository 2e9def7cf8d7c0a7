package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// scriptText is a scripted/script message playing replies.
func scriptText(t *testing.T, replies ...scripted.Reply) string {
	t.Helper()
	b, err := json.Marshal(scripted.Script{Replies: replies})
	if err != nil {
		t.Fatal(err)
	}
	return scripted.ScriptPrefix + string(b)
}

func calls(id, name string, args map[string]any) scripted.Reply {
	return scripted.Reply{ToolCalls: []scripted.ToolCall{{ID: id, Name: name, Arguments: args}}}
}

// TestProcessOnAFleet: a member started with --exec --process runs a
// model's real background process: started, polled for what is new,
// written to, killed; a process id of another worker gets the error that
// says where it ran; /reset kills what the session left running.
func TestProcessOnAFleet(t *testing.T) {
	t.Parallel()
	m, c, ctx := runMember(t, Config{DataDir: t.TempDir(), WorkspaceRoot: t.TempDir(), WorkspaceMaxBytes: -1, WorkerID: "w1",
		Exec: true, ExecUnconfined: true, Process: true, DefaultModel: "scripted/echo"})
	script := scriptText(t,
		calls("s", "process", map[string]any{"action": "start", "command": `echo ready; read x; echo "got:$x"; sleep 600`}),
		calls("p1", "process", map[string]any{"action": "poll", "sessionId": "p1@w1", "timeout": 20000}),
		calls("w", "process", map[string]any{"action": "write", "sessionId": "p1@w1", "data": "hello\n"}),
		calls("p2", "process", map[string]any{"action": "poll", "sessionId": "p1@w1", "timeout": 20000}),
		calls("k", "process", map[string]any{"action": "kill", "sessionId": "p1@w1"}),
		calls("o", "process", map[string]any{"action": "poll", "sessionId": "p1@w0"}),
		scripted.Reply{Text: "done"})
	v := watch(t, ctx, c, "acme:proc", script, lanefleet.WithModel("scripted/script"))
	if v.runErr != nil || v.result.Payloads[0].Text != "done" {
		t.Fatalf("%+v %v", v.result, v.runErr)
	}
	res := toolResults(t, ctx, c, "acme:proc")
	want := map[string]string{
		"s":  `Started p1@w1 (sessionId "p1@w1")`,
		"p1": "ready",
		"w":  "Wrote 6 bytes to p1@w1.",
		"p2": "got:hello",
		"k":  "Killed p1@w1 and the processes it started.",
		"o":  `process "p1@w0" not found on this worker (w1): it ran on worker "w0"`,
	}
	for id, w := range want {
		if !strings.Contains(res[id], w) {
			t.Errorf("%s: %q, want %q", id, res[id], w)
		}
	}
	if strings.Contains(res["p2"], "ready") {
		t.Errorf("the second poll repeated the first's output: %q", res["p2"])
	}
	if n := m.procs.Running(); n != 0 {
		t.Errorf("%d running after kill", n)
	}

	// A process left running ends with the session's /reset.
	v = watch(t, ctx, c, "acme:proc", scriptText(t, calls("s2", "process", map[string]any{"action": "start", "command": "sleep 600"}), scripted.Reply{Text: "left"}),
		lanefleet.WithModel("scripted/script"))
	if v.runErr != nil || m.procs.Running() != 1 {
		t.Fatalf("%v, %d running", v.runErr, m.procs.Running())
	}
	if v = watch(t, ctx, c, "acme:proc", "/reset"); v.runErr != nil {
		t.Fatal(v.runErr)
	}
	if n := m.procs.Running(); n != 0 {
		t.Errorf("%d running after /reset", n)
	}
}

// TestMemoryToolsOnAFleet: with --memory-tools a model writes its
// MEMORY.md and finds it again by keyword, then reads its lines.
func TestMemoryToolsOnAFleet(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	_, c, ctx := runMember(t, Config{DataDir: t.TempDir(), WorkspaceRoot: root, MemoryTools: true, DefaultModel: "scripted/echo"})
	script := scriptText(t,
		calls("w", "write", map[string]any{"path": "memory/2026-11-29.md", "content": "# Decisions\nWe chose Postgres for the ledger.\n"}),
		calls("s", "memory_search", map[string]any{"query": "which database: postgres?"}),
		calls("g", "memory_get", map[string]any{"path": "memory/2026-11-29.md", "from": 2, "lines": 1}),
		calls("x", "memory_get", map[string]any{"path": "../other/MEMORY.md"}),
		scripted.Reply{Text: "remembered"})
	v := watch(t, ctx, c, "acme:mem", script, lanefleet.WithModel("scripted/script"))
	if v.runErr != nil || v.result.Payloads[0].Text != "remembered" {
		t.Fatalf("%+v %v", v.result, v.runErr)
	}
	res := toolResults(t, ctx, c, "acme:mem")
	if !strings.HasPrefix(res["s"], "memory/2026-11-29.md:1-2 (score ") || !strings.Contains(res["s"], "We chose Postgres") {
		t.Errorf("search: %q", res["s"])
	}
	if res["g"] != "We chose Postgres for the ledger.\n\n[lines 2-2 of 2; from=3 continues]" && res["g"] != "We chose Postgres for the ledger." {
		t.Errorf("get: %q", res["g"])
	}
	if !strings.Contains(res["x"], "escapes the workspace") {
		t.Errorf("escape: %q", res["x"])
	}
}

// TestSessionToolsOnAFleet: with --session-tools tenant a session lists
// and reads the sessions of its tenant (secrets in them masked), is
// refused another tenant's, and sends a real message onto a session's
// lane, which runs it as a turn marked with where it came from.
func TestSessionToolsOnAFleet(t *testing.T) {
	t.Parallel()
	_, c, ctx := maskingMember(t, Config{SessionTools: "tenant", SessionSender: clientSender, NoBuiltinTools: true})
	for session, text := range map[string]string{"acme:a": "hello", "acme:b": "my key is " + providerKey, "globex:z": "other tenant"} {
		if v := watch(t, ctx, c, session, text); v.runErr != nil {
			t.Fatal(v.runErr)
		}
	}
	// The listing trails a turn's end: a session is listed once its index
	// entry is stored, and runs as long as its run's registry entry stays,
	// both written off the turn's path. Once the listing shows acme:a and
	// an idle acme:b, acme:a's sessions_list below sees them too.
	listedAs(t, ctx, c, map[string]string{"acme:a": admin.StateIdle, "acme:b": admin.StateIdle})
	script := scriptText(t,
		calls("l", "sessions_list", nil),
		calls("h", "sessions_history", map[string]any{"sessionKey": "acme:b"}),
		calls("x", "sessions_history", map[string]any{"sessionKey": "globex:z"}),
		calls("s", "sessions_send", map[string]any{"sessionKey": "acme:b", "message": "status please"}),
		scripted.Reply{Text: "sent"})
	v := watch(t, ctx, c, "acme:a", script, lanefleet.WithModel("scripted/script"))
	if v.runErr != nil || v.result.Payloads[0].Text != "sent" {
		t.Fatalf("%+v %v", v.result, v.runErr)
	}
	res := toolResults(t, ctx, c, "acme:a")
	if !strings.Contains(res["l"], "acme:b  idle") || !strings.Contains(res["l"], "(this session)") || strings.Contains(res["l"], "globex") {
		t.Errorf("list: %q", res["l"])
	}
	if !strings.Contains(res["h"], "user: my key is ") || strings.Contains(res["h"], providerKey) || !strings.Contains(res["h"], "assistant: echo: my key is") {
		t.Errorf("history (the key must be masked): %q", res["h"])
	}
	if !strings.Contains(res["x"], "out of reach") {
		t.Errorf("other tenant: %q", res["x"])
	}
	if !strings.HasPrefix(res["s"], "Sent to acme:b (run ") {
		t.Errorf("send: %q", res["s"])
	}
	// Messages on a lane run in order: once this one has run, the sent
	// one has.
	if v := watch(t, ctx, c, "acme:b", "after"); v.runErr != nil {
		t.Fatal(v.runErr)
	}
	h := historyTexts(t, ctx, c, "acme:b")
	want := fmt.Sprintf("user: %q", "[Message from session acme:a, sent with sessions_send]\n\nstatus please")
	found := false
	for i, line := range h {
		if strings.HasPrefix(line, want) && i+1 < len(h) && strings.HasPrefix(h[i+1], `assistant: "echo: [Message from session acme:a`) {
			found = true
		}
	}
	if !found {
		t.Errorf("acme:b's history has no answered message from acme:a: %q", h)
	}
}

// TestProcessAcrossWorkers: two workers share a fleet; a session's
// background process runs on the worker that took its turn, and dies when
// that worker stops. The session's next turn, on the other worker, asks
// for it and is told where it ran.
func TestProcessAcrossWorkers(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	members := map[string]*Member{}
	stops := map[string]func(){}
	for _, id := range []string{"w1", "w2"} {
		m, err := startMember(t, Config{NATSURL: srv.URL, WorkerID: id, WorkspaceRoot: t.TempDir(), WorkspaceMaxBytes: -1,
			Exec: true, ExecUnconfined: true, Process: true, DefaultModel: "scripted/echo"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		var once sync.Once
		stop := func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		members[id], stops[id] = m, stop
	}
	_, c, ctx := runStartedClient(t, members["w1"])
	v := watch(t, ctx, c, "acme:p", scriptText(t, calls("s", "process", map[string]any{"action": "start", "command": "sleep 600"}), scripted.Reply{Text: "started"}),
		lanefleet.WithModel("scripted/script"))
	if v.runErr != nil {
		t.Fatal(v.runErr)
	}
	started := toolResults(t, ctx, c, "acme:p")["s"]
	ran, other := "w1", "w2"
	if strings.Contains(started, "p1@w2") {
		ran, other = "w2", "w1"
	}
	if !strings.Contains(started, "p1@"+ran) || members[ran].procs.Running() != 1 {
		t.Fatalf("start: %q", started)
	}
	stops[ran]()
	if n := members[ran].procs.Running(); n != 0 {
		t.Errorf("%d processes outlived their worker", n)
	}
	_, c, ctx = runStartedClient(t, members[other])
	v = watch(t, ctx, c, "acme:p", scriptText(t, calls("q", "process", map[string]any{"action": "poll", "sessionId": "p1@" + ran}), scripted.Reply{Text: "asked"}),
		lanefleet.WithModel("scripted/script"))
	if v.runErr != nil {
		t.Fatal(v.runErr)
	}
	want := fmt.Sprintf("process %q not found on this worker (%s): it ran on worker %q", "p1@"+ran, other, ran)
	if got := toolResults(t, ctx, c, "acme:p")["q"]; !strings.Contains(got, want) {
		t.Errorf("poll on the other worker: %q, want %q", got, want)
	}
}

// clientSender is cmd/worker's sessions_send publisher: the Go client's
// Send, not following the run.
func clientSender(nc *nats.Conn) (SendFunc, error) {
	c, err := lanefleet.New(nc)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, key, text, id string) (string, error) {
		run, err := c.Send(ctx, key, text, lanefleet.WithMessageID(id), lanefleet.WithoutFollow())
		if err != nil {
			return "", err
		}
		return run.ID, nil
	}, nil
}
