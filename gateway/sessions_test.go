package gateway

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/tools"
)

// TestSendAndFollow: a message sent over HTTP runs, and its events stream
// as server-sent events whose ids are the events' seqs, 1, 2, 3… to the
// final one; the run's resource then answers with the result.
func TestSendAndFollow(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	resp := b.do(t, "acme", "POST", "/api/sessions/acme:1/messages", `{"text":"hello there"}`, "Idempotency-Key", "m-1")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %d", resp.StatusCode)
	}
	var sent SendReply
	readJSON(t, resp, &sent)
	if sent.RunID == "" || sent.MessageID != "m-1" || sent.Events != "/api/sessions/acme:1/runs/"+sent.RunID+"/events" || resp.Header.Get("Location") == "" {
		t.Fatalf("send reply %+v", sent)
	}
	resp = b.do(t, "acme", "GET", sent.Events, "")
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" || resp.Header.Get("Lanefleet-Run") != sent.RunID {
		t.Fatalf("events: %d %q", resp.StatusCode, ct)
	}
	evs, err := readSSE(resp.Body, nil)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := seqs(t, evs)
	for i, s := range got {
		if s != uint64(i+1) {
			t.Fatalf("seqs %v: not 1, 2, 3…", got)
		}
	}
	if evs[len(evs)-1].event != "final" || replyOf(t, evs) != "echo: hello there" {
		t.Fatalf("events %+v", evs)
	}
	// The same message id again: no second turn; its run's result is the
	// first run's.
	resp = b.do(t, "acme", "POST", "/api/sessions/acme:1/messages", `{"text":"hello there","messageId":"m-1"}`)
	var again SendReply
	readJSON(t, resp, &again)
	resp = b.do(t, "acme", "GET", "/api/sessions/acme:1/runs/"+again.RunID, "")
	var dup RunReply
	readJSON(t, resp, &dup)
	if dup.Status != "done" || dup.Result.Meta.MergedInto != sent.RunID || dup.Result.Payloads[0].Text != "echo: hello there" {
		t.Fatalf("idempotent send: %+v", dup)
	}
	resp = b.do(t, "acme-viewer", "GET", "/api/sessions/acme:1/runs/"+sent.RunID, "")
	var rr RunReply
	readJSON(t, resp, &rr)
	if resp.StatusCode != 200 || rr.Status != "done" || rr.Result == nil || rr.Result.Payloads[0].Text != "echo: hello there" {
		t.Fatalf("run: %d %+v", resp.StatusCode, rr)
	}
	resp = b.do(t, "acme-viewer", "GET", "/api/sessions/acme:1/history", "")
	var h struct {
		Entries []json.RawMessage `json:"entries"`
	}
	readJSON(t, resp, &h)
	if len(h.Entries) < 2 || !strings.Contains(string(h.Entries[len(h.Entries)-1]), "echo: hello there") {
		t.Fatalf("history: %d entries", len(h.Entries))
	}
	// Stream in the send's own answer.
	resp = b.do(t, "acme", "POST", "/api/sessions/acme:1/messages", `{"text":"second","stream":true}`)
	evs, err = readSSE(resp.Body, nil)
	resp.Body.Close()
	if err != nil || replyOf(t, evs) != "echo: second" || resp.Header.Get("Lanefleet-Run") == "" {
		t.Fatalf("streamed send: %v %+v", err, evs)
	}
	resp = b.do(t, "acme", "POST", "/api/sessions/acme:1/messages", `{"text":"third"}`, "Accept", "text/event-stream")
	evs, err = readSSE(resp.Body, nil)
	resp.Body.Close()
	if err != nil || replyOf(t, evs) != "echo: third" {
		t.Fatalf("send accepting text/event-stream: %v %+v", err, evs)
	}
}

// TestResumeLastEventID: a stream resumed with Last-Event-ID (or ?after=)
// starts after that event: the two halves are the whole run, each event
// once.
func TestResumeLastEventID(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	resp := b.do(t, "acme", "POST", "/api/sessions/acme:r/messages", `{"text":"one two three four five six"}`)
	var sent SendReply
	readJSON(t, resp, &sent)
	resp = b.do(t, "acme", "GET", sent.Events, "")
	all, _ := readSSE(resp.Body, nil)
	resp.Body.Close()
	if len(all) < 4 {
		t.Fatalf("%d events", len(all))
	}
	for _, cut := range []int{1, len(all) / 2, len(all) - 1} {
		first := all[:cut]
		resp = b.do(t, "acme", "GET", sent.Events, "", "Last-Event-ID", first[len(first)-1].id)
		rest, _ := readSSE(resp.Body, nil)
		resp.Body.Close()
		if !slices.Equal(names(append(slices.Clone(first), rest...)), names(all)) {
			t.Fatalf("cut at %d: %v + %v != %v", cut, seqs(t, first), seqs(t, rest), seqs(t, all))
		}
		resp = b.do(t, "acme", "GET", sent.Events+"?after="+first[len(first)-1].id, "")
		rest2, _ := readSSE(resp.Body, nil)
		resp.Body.Close()
		if !slices.Equal(names(rest2), names(rest)) {
			t.Fatalf("?after= differs from Last-Event-ID")
		}
	}
	wantProblem(t, b.do(t, "acme", "GET", sent.Events, "", "Last-Event-ID", "x"), 400, CodeInvalidInput)
}

// TestStreamWritesEventsAtHandOnce: events the gateway has at hand at
// once go to the connection in one write, not one each: a finished run's
// events, read again from the store, follow the stream's head in a single
// write (with the hijacked follower stream's end), and the stream is whole.
func TestStreamWritesEventsAtHandOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var writes atomic.Int64
	ts := httptest.NewUnstartedServer(b.srv)
	ts.Listener = countingListener{Listener: ts.Listener, writes: &writes}
	ts.Config = b.srv.HTTPServer()
	ts.Start()
	t.Cleanup(ts.Close)
	b.ts = ts
	resp := b.do(t, "acme", "POST", "/api/sessions/acme:w/messages", `{"text":"one two three four"}`)
	var sent SendReply
	readJSON(t, resp, &sent)
	if _, err := b.client.Run("acme:w", sent.RunID).Wait(b.ctx); err != nil {
		t.Fatal(err)
	}
	writes.Store(0)
	resp = b.do(t, "acme", "GET", sent.Events, "")
	evs, err := readSSE(resp.Body, nil)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := seqs(t, evs)
	if len(got) < 4 || got[0] != 1 || got[len(got)-1] != uint64(len(got)) || evs[len(evs)-1].event != "final" {
		t.Fatalf("events %v", got)
	}
	// One write for the head and all the events.
	if n := writes.Load(); n != 1 {
		t.Fatalf("the stream of %d stored events took %d writes, want 1 (its head and the events)", len(evs), n)
	}
}

// TestStreamHeadGoesWithFirstEvents: a streamed send's head (status,
// headers, the ": run" comment) goes to the connection in the same write
// as the run's first events, not a write of its own.
func TestStreamHeadGoesWithFirstEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.srv.headHold = time.Minute // the first events come long before
	written := recordWrites(t, b)
	resp := b.do(t, "acme", "POST", "/api/sessions/acme:h/messages", `{"text":"hello","stream":true}`)
	evs, err := readSSE(resp.Body, nil)
	resp.Body.Close()
	if err != nil || replyOf(t, evs) != "echo: hello" || resp.Header.Get("Lanefleet-Run") == "" {
		t.Fatalf("stream: %v, %d events", err, len(evs))
	}
	writes := written()
	if len(writes) == 0 {
		t.Fatal("no writes")
	}
	first := string(writes[0])
	if !strings.HasPrefix(first, "HTTP/1.1 200 OK\r\n") || !strings.Contains(first, "\r\n: run ") || !strings.Contains(first, "\nid: 1\n") {
		t.Fatalf("the first write is not the head with the first event:\n%s", first)
	}
}

// TestStreamHeadWithoutEvents: a streamed send whose run does not start
// (queued behind the session's running turn) gets its head within the
// hold, not once the run starts.
func TestStreamHeadWithoutEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.srv.headHold = 50 * time.Millisecond
	script := `#script {"replies":[{"text":"` + strings.Repeat("slow ", 20) + `","chunks":20,"delayMs":100}]}`
	body, _ := json.Marshal(map[string]any{"text": script, "model": "scripted/script"})
	resp := b.do(t, "acme", "POST", "/api/sessions/acme:q/messages", string(body))
	var first SendReply
	readJSON(t, resp, &first)
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		if _, err := b.client.Run("acme:q", first.RunID).Wait(b.ctx); err != nil {
			t.Error(err)
		}
	}()
	resp = b.do(t, "acme", "POST", "/api/sessions/acme:q/messages", `{"text":"queued","mode":"followup","stream":true}`)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Lanefleet-Run") == "" {
		t.Fatalf("streamed send: %d, run %q", resp.StatusCode, resp.Header.Get("Lanefleet-Run"))
	}
	// The head came while the first run (2 s) still runs.
	select {
	case <-firstDone:
		t.Fatal("the queued send's head came once the run before it had ended")
	default:
	}
	evs, err := readSSE(resp.Body, nil)
	if err != nil || replyOf(t, evs) != "echo: queued" {
		t.Fatalf("the queued run's stream: %v, %d events", err, len(evs))
	}
	<-firstDone
}

// recordWrites serves b's server, as b.ts, on a listener that records
// every write to a client; the function it returns takes what was
// written since its last call.
func recordWrites(t *testing.T, b *bundle) func() [][]byte {
	t.Helper()
	var mu sync.Mutex
	var writes [][]byte
	ts := httptest.NewUnstartedServer(b.srv)
	ts.Listener = recordingListener{Listener: ts.Listener, record: func(p []byte) {
		mu.Lock()
		writes = append(writes, slices.Clone(p))
		mu.Unlock()
	}}
	ts.Config = b.srv.HTTPServer()
	ts.Start()
	t.Cleanup(ts.Close)
	b.ts = ts
	return func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		w := writes
		writes = nil
		return w
	}
}

// recordingListener hands every write to its connections to record.
type recordingListener struct {
	net.Listener
	record func([]byte)
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, record: l.record}, nil
}

type recordingConn struct {
	net.Conn
	record func([]byte)
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.record(b)
	return c.Conn.Write(b)
}

// countingListener counts the writes to its connections.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, writes: l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestSessionOperations: settings (read, change, reset), stop, backlog,
// approvals, the caller's sessions and runs, dead letters.
func TestSessionOperations(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	resp := b.do(t, "acme", "PATCH", "/api/sessions/acme:s/settings", `{"queue":{"mode":"collect","debounceMs":0},"run":{"thinking":"low"}}`)
	var ap AppliedReply
	readJSON(t, resp, &ap)
	if resp.StatusCode != 200 || !ap.Applied || !strings.Contains(ap.Text, "collect") {
		t.Fatalf("patch settings: %d %+v", resp.StatusCode, ap)
	}
	resp = b.do(t, "acme-viewer", "GET", "/api/sessions/acme:s/settings", "")
	var st SettingsReply
	readJSON(t, resp, &st)
	if st.Queue == nil || st.Queue.Mode != "collect" || st.Run == nil || st.Run.Thinking != "low" {
		t.Fatalf("settings %+v", st)
	}
	wantProblem(t, b.do(t, "acme", "PATCH", "/api/sessions/acme:s/settings", `{"queue":{"mode":"sideways"}}`), 400, CodeInvalidInput)
	wantProblem(t, b.do(t, "acme", "PATCH", "/api/sessions/acme:s/settings", `{}`), 400, CodeInvalidInput)
	resp = b.do(t, "acme", "DELETE", "/api/sessions/acme:s/settings", "")
	readJSON(t, resp, &ap)
	if !ap.Applied {
		t.Fatalf("reset: %+v", ap)
	}
	resp = b.do(t, "acme", "POST", "/api/sessions/acme:s/stop", "")
	readJSON(t, resp, &ap)
	if resp.StatusCode != 200 || !ap.Applied || ap.Text == "" {
		t.Fatalf("stop: %d %+v", resp.StatusCode, ap)
	}
	resp = b.do(t, "acme", "GET", "/api/sessions/acme:s/backlog", "")
	var bl map[string]any
	readJSON(t, resp, &bl)
	if resp.StatusCode != 200 {
		t.Fatalf("backlog: %d", resp.StatusCode)
	}
	resp = b.do(t, "acme", "GET", "/api/sessions/acme:s/approvals", "")
	var apv struct{ Approvals []any }
	readJSON(t, resp, &apv)
	if resp.StatusCode != 200 || apv.Approvals == nil || len(apv.Approvals) != 0 {
		t.Fatalf("approvals: %d %+v", resp.StatusCode, apv)
	}
	wantProblem(t, b.do(t, "acme", "POST", "/api/sessions/acme:s/approvals/call-1", `{"decision":"approve"}`), 404, CodeNotFound)
	wantProblem(t, b.do(t, "acme", "POST", "/api/sessions/acme:s/approvals/call-1", `{"decision":"maybe"}`), 400, CodeInvalidInput)
	// globex's session, then the listings.
	resp = b.do(t, "globex", "POST", "/api/sessions/globex:1/messages", `{"text":"hi","stream":true}`)
	readSSE(resp.Body, nil)
	resp.Body.Close()
	for name, want := range map[string][]string{"acme": {"acme:s"}, "globex": {"globex:1"}, "root": {"acme:s", "globex:1"}} {
		resp = b.do(t, name, "GET", "/api/sessions", "")
		var ls struct {
			Sessions []struct{ Key string }
		}
		readJSON(t, resp, &ls)
		var keys []string
		for _, s := range ls.Sessions {
			keys = append(keys, s.Key)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			t.Fatalf("%s lists %v, want %v", name, keys, want)
		}
	}
	resp = b.do(t, "root", "GET", "/api/sessions?limit=1", "")
	var page struct {
		Sessions []any
		Next     string
	}
	readJSON(t, resp, &page)
	if len(page.Sessions) != 1 || page.Next == "" {
		t.Fatalf("page %+v", page)
	}
	resp = b.do(t, "acme", "GET", "/api/runs", "")
	var runs struct{ Runs []any }
	readJSON(t, resp, &runs)
	if resp.StatusCode != 200 || runs.Runs == nil {
		t.Fatalf("runs: %d", resp.StatusCode)
	}
	resp = b.do(t, "root", "GET", "/api/dead-letters", "")
	var dl struct{ Letters []any }
	readJSON(t, resp, &dl)
	if resp.StatusCode != 200 || dl.Letters == nil {
		t.Fatalf("dead letters: %d", resp.StatusCode)
	}
	wantProblem(t, b.do(t, "root", "GET", "/api/dead-letters/99", ""), 404, CodeNotFound)
}

// names are the events' ids and streams (their data may differ between
// the live copy and the stored one: timestamps of a re-published final).
func names(evs []sseEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprint(e.id, " ", e.event))
	}
	return out
}

// TestTraceparent: the caller's traceparent continues into the fleet: the
// message the gateway publishes carries the caller's trace id.
func TestTraceparent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	nc := natstest.Connect(t, b.url)
	sub, err := nc.SubscribeSync("agent.in.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp := b.do(t, "acme", "POST", "/api/sessions/acme:t/messages", `{"text":"traced"}`, "traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	resp.Body.Close()
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if tp := m.Header.Get("traceparent"); !strings.Contains(tp, trace) {
		t.Fatalf("the published message's traceparent %q does not continue trace %s", tp, trace)
	}
}

// TestDisconnectKeepsRun: a client that goes away mid-stream (its own
// send's stream, or a follower's) does not cancel the run: it ends with
// its whole reply, and a later follower reads it.
func TestDisconnectKeepsRun(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	script := `#script {"replies":[{"text":"all of it","chunks":3,"delayMs":150}]}`
	body, _ := json.Marshal(map[string]any{"text": script, "model": "scripted/script", "stream": true})
	resp := b.do(t, "acme", "POST", "/api/sessions/acme:d/messages", string(body))
	run := resp.Header.Get("Lanefleet-Run")
	if _, err := readSSE(resp.Body, func(e sseEvent) bool { return e.event == "assistant" }); err != nil || run == "" {
		t.Fatalf("run %q: %v", run, err)
	}
	resp.Body.Close() // gone mid-reply
	follow := b.do(t, "acme", "GET", "/api/sessions/acme:d/runs/"+run+"/events", "")
	if _, err := readSSE(follow.Body, func(e sseEvent) bool { return e.event == "assistant" }); err != nil {
		t.Fatal(err)
	}
	follow.Body.Close() // this one too
	resp = b.do(t, "acme", "GET", "/api/sessions/acme:d/runs/"+run+"?wait=30s", "")
	var rr RunReply
	readJSON(t, resp, &rr)
	if rr.Status != "done" || rr.Result == nil || rr.Result.Meta.Error != nil || rr.Result.Payloads[0].Text != "all of it" {
		t.Fatalf("the run after its clients left: %+v", rr)
	}
}

// TestApprovalFlow: a worker tool call that waits for approval is listed
// by GET …/approvals; POST …/approvals/{call} with "approve" runs it and
// the turn goes on; the list is then empty.
func TestApprovalFlow(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	b := setup(t, setupOpts{member: func(c *fleet.Config) {
		c.WorkspaceRoot = root
		c.ToolPolicy = tools.Policy{Approve: []string{"write"}}
	}})
	resp := b.do(t, "acme", "PATCH", "/api/sessions/acme:ap/settings", `{"run":{"model":"scripted/script"}}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("settings: %d", resp.StatusCode)
	}
	script := `#script {"replies":[{"toolCalls":[{"id":"w1","name":"write","arguments":{"path":"approved.txt","content":"yes"}}]},{"text":"done"}]}`
	body, _ := json.Marshal(map[string]any{"text": script, "stream": true})
	resp = b.do(t, "acme", "POST", "/api/sessions/acme:ap/messages", string(body))
	evs, _ := readSSE(resp.Body, nil)
	resp.Body.Close()
	if last := evs[len(evs)-1]; last.event != "final" || !strings.Contains(last.data, `"stopReason":"tool_calls"`) {
		t.Fatalf("first run: %+v", last)
	}
	resp = b.do(t, "acme-viewer", "GET", "/api/sessions/acme:ap/approvals", "")
	var ap struct {
		Approvals []struct{ ID, Name string }
	}
	readJSON(t, resp, &ap)
	if len(ap.Approvals) != 1 || ap.Approvals[0].ID != "w1" || ap.Approvals[0].Name != "write" {
		t.Fatalf("approvals %+v", ap)
	}
	tok, _ := events.KeyToken("acme:ap")
	if _, err := os.Stat(filepath.Join(root, tok, "approved.txt")); err == nil {
		t.Fatal("the call ran before its approval")
	}
	wantProblem(t, b.do(t, "acme-viewer", "POST", "/api/sessions/acme:ap/approvals/w1", `{"decision":"approve"}`), 403, CodeForbidden)
	resp = b.do(t, "acme", "POST", "/api/sessions/acme:ap/approvals/w1", `{"decision":"approve","stream":true}`)
	evs, _ = readSSE(resp.Body, nil)
	resp.Body.Close()
	if got := replyOf(t, evs); got != "done" {
		t.Fatalf("after the approval: %q", got)
	}
	if data, err := os.ReadFile(filepath.Join(root, tok, "approved.txt")); err != nil || string(data) != "yes" {
		t.Fatalf("the approved call: %q %v", data, err)
	}
	resp = b.do(t, "acme", "GET", "/api/sessions/acme:ap/approvals", "")
	readJSON(t, resp, &ap)
	if len(ap.Approvals) != 0 {
		t.Fatalf("approvals left: %+v", ap)
	}
}
