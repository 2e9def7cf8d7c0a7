package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
)

// promptServer is a Chat Completions endpoint that answers "ok" and records
// the user texts of every request it is sent: what the model saw.
type promptServer struct {
	*httptest.Server
	mu   sync.Mutex
	sent [][]string
}

func newPromptServer(t *testing.T) *promptServer {
	t.Helper()
	ps := &promptServer{}
	ps.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		var users []string
		for _, m := range req.Messages {
			if m.Role != "user" {
				continue
			}
			var s string
			if json.Unmarshal(m.Content, &s) != nil {
				var parts []struct {
					Text string `json:"text"`
				}
				_ = json.Unmarshal(m.Content, &parts)
				for _, p := range parts {
					s += p.Text
				}
			}
			users = append(users, s)
		}
		ps.mu.Lock()
		ps.sent = append(ps.sent, users)
		ps.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(sseText("ok")))
	}))
	t.Cleanup(ps.Close)
	return ps
}

func (ps *promptServer) requests() []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]string, len(ps.sent))
	for i, u := range ps.sent {
		out[i] = strings.Join(u, " | ")
	}
	return out
}

// TestChatCommandsInLaneOrder: on a fleet of two workers, chat commands
// sent among ordinary messages are answered in lane order, each with a
// short reply and no model call; the settings commands change the
// settings exactly between the messages before and after them; /new
// starts the transcript anew and runs its text as the first message;
// /reset empties it and keeps the settings; an unknown /foo goes to the
// model as it is.
func TestChatCommandsInLaneOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ps := newPromptServer(t)
	models, profiles := acmeModels(t, ps.URL, "sk-acme-commands")
	srv := natstest.Start(t)
	for _, id := range []string{"w1", "w2"} {
		startMember(t, srv.URL, fleet.Config{WorkerID: id, ModelsFile: models, AuthProfiles: profiles, NoBuiltinTools: true,
			DefaultModel: "acme/m1", Env: func(string) string { return "" }})
	}
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const s = "cc:order"
	texts := []string{
		"one",
		"/status",
		"/think: high",
		"/QUEUE collect debounce:0 cap:5",
		"/queue",
		"/model",
		"two",
		"/help",
		"/verbose off",
		"/reasoning off",
		"/new three",
		"/foo bar",
		"/reset",
		"/think",
	}
	var runs []*lanefleet.Run
	for _, text := range texts {
		r, err := c.Send(ctx, s, text)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	want := []string{
		"ok",
		"Model: acme/m1 (default)",
		"Thinking level set to high.",
		"Queue settings set to mode collect, debounce 0ms, cap 5.",
		"Queue settings are mode collect, debounce 0ms, cap 5.",
		"Model: acme/m1 (the worker's default).",
		"ok",
		"Commands (a message that is only the command; nothing is sent to the model):",
		"Verbose set to off.",
		"Reasoning set to off.",
		"ok",
		"ok",
		"New session started: the transcript is empty; settings are kept.",
		"Thinking level is high.",
	}
	for i, r := range runs {
		res, err := r.Wait(ctx)
		if err != nil || len(res.Payloads) == 0 || !strings.HasPrefix(res.Payloads[0].Text, want[i]) {
			t.Fatalf("%q: %+v, %v; want a reply starting %q", texts[i], res, err, want[i])
		}
	}
	// The model saw the ordinary messages only, and after /new none of
	// what came before.
	got := ps.requests()
	wantSent := []string{"one", "one | two", "three", "three | /foo bar"}
	if strings.Join(got, "\n") != strings.Join(wantSent, "\n") {
		t.Fatalf("the model was sent\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantSent, "\n"))
	}
	h, err := c.History(ctx, s)
	if err != nil || len(h) != 0 {
		t.Fatalf("history after /reset: %d entries, %v; want none", len(h), err)
	}
	st, err := c.Settings(ctx, s)
	if err != nil || st.Run == nil || st.Run.Thinking != "high" || st.Run.Verbose != "off" || st.Run.Reasoning != "off" || st.Queue.Mode != "collect" {
		t.Fatalf("settings after /reset: %+v, %v; want thinking high, verbose off, reasoning off, mode collect kept", st, err)
	}
	// A message after the reset starts from nothing, on whichever worker.
	if res, err := waitResult(t, ctx, c, s, "four"); err != nil || res.Payloads[0].Text != "ok" {
		t.Fatalf("after /reset: %+v, %v", res, err)
	}
	if got := ps.requests(); got[len(got)-1] != "four" {
		t.Fatalf("the first message after /reset was sent with %q", got[len(got)-1])
	}
	h, _ = c.History(ctx, s)
	if len(h) != 2 || h[0].Message == nil || h[0].Message.Role != message.RoleUser {
		t.Fatalf("history after the reset's next message: %d entries", len(h))
	}
}

// TestChatCommandsOff: a worker run with --no-chat-commands sends a
// command's text to the model as it is.
func TestChatCommandsOff(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", DefaultModel: "scripted/echo", NoBuiltinTools: true, NoChatCommands: true})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := waitResult(t, ctx, c, "cc:off", "/status")
	if err != nil || res.Payloads[0].Text != "echo: /status" {
		t.Fatalf("/status with commands off: %+v, %v; want the model's echo", res, err)
	}
}

// TestChatCommandStopCutsTheRunningTurn: /stop sent while a turn streams
// ends it at once, as publisher stop does, and says which run it stopped.
func TestChatCommandStopCutsTheRunningTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", DefaultModel: "scripted/echo", NoBuiltinTools: true, ScriptedDelay: 200 * time.Millisecond})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const s = "cc:stop"
	long, err := c.Send(ctx, s, "long "+strings.Repeat("word ", 100))
	if err != nil {
		t.Fatal(err)
	}
	waitStreaming(ctx, t, long, "long")
	stop, err := c.Send(ctx, s, "/stop")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Wait(ctx); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("the running turn after /stop: %v; want it stopped", err)
	}
	res, err := stop.Wait(ctx)
	if err != nil || res.Payloads[0].Text != "stopped run "+long.ID {
		t.Fatalf("/stop's reply: %+v, %v", res, err)
	}
}

// TestChatCommandNewWorkerKilled: the worker running /new's first message
// is SIGKILLed mid-turn; the survivor re-runs it. The transcript is reset
// once and holds the first message once: neither lost nor doubled.
func TestChatCommandNewWorkerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("process crash test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	// Slow turns: the kill must land while /new's first message streams
	// (640 ms at 40 ms a delta, which a loaded machine's look at the
	// stream can outlast).
	victim, _ := startProcess(t, srv.URL, "victim", "--scripted-delay", victimDelay)
	waitForFleet(t, js)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const session = "cc:kill"
	if _, err := waitResult(t, ctx, c, session, "before the reset"); err != nil {
		t.Fatal(err)
	}
	first, err := c.Send(ctx, session, "/new fresh "+strings.Repeat("word ", 15))
	if err != nil {
		t.Fatal(err)
	}
	waitStreaming(ctx, t, first, "fresh")
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	startProcess(t, srv.URL, "survivor", "--scripted-delay", "1ms")
	res, err := first.Wait(ctx)
	if err != nil || !strings.HasPrefix(res.Payloads[0].Text, "echo: fresh") {
		t.Fatalf("/new's first message after the kill: %+v, %v", res, err)
	}
	if _, phases := checkRun(t, js, session, first.ID); strings.Join(phases, " ") != "start@1 aborted@1 restart@2 end@2" {
		t.Fatalf("/new run lifecycle = %v, want the killed attempt aborted, then a restart", phases)
	}
	users := userTexts(t, c, session)
	if len(users) != 1 || !strings.HasPrefix(users[0], "fresh") {
		t.Fatalf("transcript after /new: user entries %q, want only the first message once", users)
	}
	if _, err := waitResult(t, ctx, c, session, "after"); err != nil {
		t.Fatal(err)
	}
	if users := userTexts(t, c, session); len(users) != 2 || users[1] != "after" {
		t.Fatalf("transcript after the next message: %q", users)
	}
}

// TestChatCommandCompact: /compact with a focus makes one summary request
// carrying the focus (no reply is asked of the model) and stores the
// compaction in the transcript; the next turn is sent the summary.
func TestChatCommandCompact(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ps := newPromptServer(t)
	models, profiles := acmeModels(t, ps.URL, "sk-acme-compact")
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, NoBuiltinTools: true,
		DefaultModel: "acme/m1", Env: func(string) string { return "" }})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const s = "cc:compact"
	// Turns long enough to leave something older than the recent part
	// compaction keeps (20,000 tokens).
	for _, text := range []string{"one " + strings.Repeat("alpha ", 15000), "two " + strings.Repeat("bravo ", 15000)} {
		if _, err := waitResult(t, ctx, c, s, text); err != nil {
			t.Fatal(err)
		}
	}
	res, err := waitResult(t, ctx, c, s, "/compact keep the numbers")
	if err != nil || !strings.HasPrefix(res.Payloads[0].Text, "Compacted") {
		t.Fatalf("/compact: %+v, %v", res, err)
	}
	sent := ps.requests()
	if len(sent) != 3 || !strings.Contains(sent[2], "keep the numbers") {
		t.Fatalf("requests: %q; want the two turns, then one summary request with the focus", sent)
	}
	h, err := c.History(ctx, s)
	if err != nil || len(h) == 0 || h[len(h)-1].Type != "compaction" {
		t.Fatalf("history after /compact: %d entries, %v; want a compaction last", len(h), err)
	}
}
