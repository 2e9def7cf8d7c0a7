package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
)

func startFleet(t *testing.T) string {
	t.Helper()
	_, url := runFleet(t)
	return url
}

// runFleet starts a server and a worker on it, running until the test
// ends, and returns the worker and the server's URL.
func runFleet(t *testing.T) (*fleet.Member, string) {
	t.Helper()
	srv := natstest.Start(t)
	m, err := fleet.Start(t.Context(), fleet.Config{NATSURL: srv.URL, Scripted: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, srv.URL
}

func publisher(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = run(ctx, args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestSendFollowsTheReply(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	out, _, err := publisher(t, "send", "--nats-url", url, "--session", "agent:main:dm:7", "hello", "there")
	if err != nil {
		t.Fatal(err)
	}
	if out != "echo: hello there\n" {
		t.Fatalf("stdout = %q", out)
	}
	// --json prints one event per line, ending with the final event.
	out, _, err = publisher(t, "send", "--json", "--nats-url", url, "--session", "agent:main:dm:7", "again")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last struct {
		Stream string `json:"stream"`
		Seq    int    `json:"seq"`
		Data   struct {
			Result struct {
				Payloads []struct{ Text string } `json:"payloads"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Stream != "final" || last.Data.Result.Payloads[0].Text != "echo: again" || last.Seq != len(lines) {
		t.Fatalf("last line = %+v of %d lines", last, len(lines))
	}
	out, _, err = publisher(t, "history", "--nats-url", url, "--session", "agent:main:dm:7")
	if err != nil {
		t.Fatal(err)
	}
	want := "user: hello there\nassistant (scripted/echo): echo: hello there\nuser: again\nassistant (scripted/echo): echo: again\n"
	if out != want {
		t.Fatalf("history =\n%s\nwant\n%s", out, want)
	}
	// History as pi session JSONL.
	out, _, err = publisher(t, "history", "--json", "--nats-url", url, "--session", "agent:main:dm:7")
	if err != nil || strings.Count(out, `"type":"message"`) != 4 {
		t.Fatalf("jsonl history = %q, %v", out, err)
	}
}

// TestSendHeartbeat: send --heartbeat runs on an idle session and is
// dropped, saying so, when the session is busy.
func TestSendHeartbeat(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	out, _, err := publisher(t, "send", "--heartbeat", "--nats-url", url, "--session", "hb", "tick")
	if err != nil || out != "echo: tick\n" {
		t.Fatalf("idle heartbeat: %q, %v", out, err)
	}
	// A turn the heartbeat arrives behind: it ends after the heartbeat
	// arrived, however soon the heartbeat is sent.
	slow := `#script {"replies":[{"text":"slow reply","chunks":4,"delayMs":500}]}`
	if _, _, err := publisher(t, "send", "--no-follow", "--nats-url", url, "--session", "hb", "--model", "scripted/script", slow); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := publisher(t, "send", "--heartbeat", "--nats-url", url, "--session", "hb", "tick")
	if !errors.Is(err, errReported) || !strings.Contains(stderr, "error (dropped): the session was busy when this heartbeat arrived") {
		t.Fatalf("busy heartbeat: err = %v, stderr = %q", err, stderr)
	}
}

// TestSendHeartbeatOK: a heartbeat the model answers with HEARTBEAT_OK
// prints no reply and leaves the transcript as it was; one it answers
// with real text is delivered and kept.
func TestSendHeartbeatOK(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	if _, _, err := publisher(t, "send", "--nats-url", url, "--session", "hbok", "hello"); err != nil {
		t.Fatal(err)
	}
	ack := `#script {"replies":[{"text":"HEARTBEAT_OK"}]}`
	out, stderr, err := publisher(t, "send", "--heartbeat", "--nats-url", url, "--session", "hbok", "--model", "scripted/script", ack)
	if err != nil || out != "" || !strings.Contains(stderr, "heartbeat: nothing to report") {
		t.Fatalf("acknowledged heartbeat: stdout %q, stderr %q, %v", out, stderr, err)
	}
	want := "user: hello\nassistant (scripted/echo): echo: hello\n"
	if out, _, err := publisher(t, "history", "--nats-url", url, "--session", "hbok"); err != nil || out != want {
		t.Fatalf("history after the ack =\n%s\nwant\n%s (%v)", out, want, err)
	}
	alert := `#script {"replies":[{"text":"The deploy failed."}]}`
	if out, _, err := publisher(t, "send", "--heartbeat", "--nats-url", url, "--session", "hbok", "--model", "scripted/script", alert); err != nil || out != "The deploy failed.\n" {
		t.Fatalf("heartbeat with news: %q, %v", out, err)
	}
	out, _, err = publisher(t, "history", "--nats-url", url, "--session", "hbok")
	if err != nil || !strings.HasSuffix(out, "assistant (scripted/script): The deploy failed.\n") {
		t.Fatalf("history after the news =\n%s (%v)", out, err)
	}
}

func TestRunErrorExitsNonZero(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	// A rejected request: a 429 or 5xx would first be retried on the same key.
	script := `#script {"replies":[{"error":{"status":400,"message":"unknown parameter: frobnicate"}}]}`
	_, stderr, err := publisher(t, "send", "--nats-url", url, "--session", "s", "--model", "scripted/script", script)
	if !errors.Is(err, errReported) || !strings.Contains(stderr, "error (provider_error)") {
		t.Fatalf("err = %v, stderr = %q", err, stderr)
	}
}

func TestClearErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nats unreachable", []string{"send", "--nats-url", "nats://127.0.0.1:1", "--session", "a", "hi"}, "cannot reach NATS"},
		{"no session", []string{"send", "hi"}, "--session is required"},
		{"unknown command", []string{"shout"}, `unknown command "shout"`},
		{"bad mode", []string{"send", "--nats-url", "nats://127.0.0.1:1", "--session", "a", "--mode", "sideways", "hi"}, "unknown queue mode"},
		{"key too long", []string{"history", "--nats-url", "nats://127.0.0.1:1", "--session", strings.Repeat("k", 300)}, "longer than 256 bytes"},
		{"empty text", []string{"send", "--nats-url", "nats://127.0.0.1:1", "--session", "a", " "}, "text: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := publisher(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestValidationBeforeSending(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	for _, args := range [][]string{
		{"send", "--nats-url", url, "--session", "a", "--mode", "sideways", "hi"},
		{"send", "--nats-url", url, "--session", "a", ""},
		{"send", "--nats-url", url, "--session", strings.Repeat("k", 300), "hi"},
	} {
		if _, _, err := publisher(t, args...); err == nil {
			t.Fatalf("%v: no error", args)
		}
	}
}

func TestExportImportRoundTrip(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	for _, text := range []string{"first", "second"} {
		if _, _, err := publisher(t, "send", "--nats-url", url, "--session", "src", text); err != nil {
			t.Fatal(err)
		}
	}
	exported, _, err := publisher(t, "history", "--json", "--nats-url", url, "--session", "src")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(exported), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], `"type":"session"`) || !strings.Contains(lines[0], `"version":3`) {
		t.Fatalf("export is not a pi session file:\n%s", exported)
	}
	path := t.TempDir() + "/src.jsonl"
	if err := os.WriteFile(path, []byte(exported), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := publisher(t, "import", "--nats-url", url, "--session", "dst", path); err != nil {
		t.Fatal(err)
	}
	// Importing again is refused: the session has a transcript now.
	if _, _, err := publisher(t, "import", "--nats-url", url, "--session", "dst", path); err == nil || !strings.Contains(err.Error(), "already has a transcript") {
		t.Fatalf("second import: %v", err)
	}
	// The conversation continues under the imported session id.
	if _, _, err := publisher(t, "send", "--nats-url", url, "--session", "dst", "third"); err != nil {
		t.Fatal(err)
	}
	again, _, err := publisher(t, "history", "--json", "--nats-url", url, "--session", "dst")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(again), "\n")
	if len(got) != 7 || got[0] != lines[0] || got[1] != lines[1] || got[4] != lines[4] {
		t.Fatalf("imported session:\n%s\nwant the export's lines first:\n%s", again, exported)
	}
}

// TestSettingsCommand: settings are set through the lane (the command waits
// until a worker applied them), then printed.
func TestSettingsCommand(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	out, _, err := publisher(t, "settings", "--nats-url", url, "--session", "q", "--mode", "coalesce", "--debounce", "250ms", "--cap", "3", "--drop", "newest")
	if err != nil || out != "queue settings: mode collect, debounce 250ms, cap 3, drop new\n" {
		t.Fatalf("set: %q, %v", out, err)
	}
	out, _, err = publisher(t, "settings", "--nats-url", url, "--session", "q")
	if err != nil || out != "stored:    mode collect, debounce 250ms, cap 3, drop new\nin force:  mode collect, debounce 250ms, cap 3, drop new\n" {
		t.Fatalf("show: %q, %v", out, err)
	}
	out, _, err = publisher(t, "settings", "--nats-url", url, "--session", "q", "--reset", "--debounce", "0")
	if err != nil || out != "queue settings: debounce 0ms\n" {
		t.Fatalf("reset and set: %q, %v", out, err)
	}
	out, _, err = publisher(t, "settings", "--nats-url", url, "--session", "q")
	if err != nil || !strings.Contains(out, "in force:  mode followup, debounce 0ms, cap 20, drop summarize") {
		t.Fatalf("show after reset: %q, %v", out, err)
	}
	if _, _, err := publisher(t, "settings", "--nats-url", url, "--session", "q", "--drop", "all"); err == nil || !strings.Contains(err.Error(), "unknown drop policy") {
		t.Fatalf("bad drop: %v", err)
	}
}

// TestRunSettingsCommand: run settings are stored through the lane, shown
// with the session's state (the usage of its turns), cleared in part (the
// tool policy) and reset; bad values are refused before anything is sent.
func TestRunSettingsCommand(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	pub := func(args ...string) string {
		t.Helper()
		out, _, err := publisher(t, append([]string{"--nats-url", url, "--session", "r"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out
	}
	if out := pub("settings", "--model", "scripted/echo", "--thinking", "HIGH", "--history-limit", "5", "--max-tool-iterations", "9", "--max-tool-repeats", "2", "--deny-tools", "exec, write"); out != "queue settings: defaults; run settings: model scripted/echo, thinking high, history limit 5, tool-loop limit 9, tool-repeat limit 2, tools deny exec write\n" {
		t.Fatalf("set: %q", out)
	}
	if out := pub("send", "hi"); out != "echo: hi\n" {
		t.Fatalf("send: %q", out)
	}
	script := `#script {"replies":[{"text":"priced","usage":{"input":5,"output":3,"cacheRead":0,"cacheWrite":0,"totalTokens":8,"cost":{"input":0.00005,"output":0.00006,"cacheRead":0,"cacheWrite":0,"total":0.00011}}}]}`
	if out := pub("send", "--model", "scripted/script", script); out != "priced\n" {
		t.Fatalf("send priced: %q", out)
	}
	out := pub("settings")
	for _, want := range []string{"run:       model scripted/echo, thinking high, history limit 5, tool-loop limit 9, tool-repeat limit 2, tools deny exec write\n",
		"usage:     2 turn(s), ", "cost $0.000110\n"} { // the echo model's usage is not priced
		if !strings.Contains(out, want) {
			t.Fatalf("show: %q lacks %q", out, want)
		}
	}
	var shown struct {
		Run   events.RunSettings  `json:"run"`
		State events.SessionState `json:"state"`
	}
	if err := json.Unmarshal([]byte(pub("settings", "--json")), &shown); err != nil || shown.Run.HistoryLimit != 5 || shown.State.Turns != 2 || shown.State.Usage.Output < 3 {
		t.Fatalf("show --json: %+v, %v", shown, err)
	}
	if out := pub("settings", "--deny-tools", ""); out != "queue settings: defaults; run settings: model scripted/echo, thinking high, history limit 5, tool-loop limit 9, tool-repeat limit 2\n" {
		t.Fatalf("clear tools: %q", out)
	}
	// A reset with values is one settings message (no turn runs between
	// them): its run reports both, and two such changes are two messages.
	if out := pub("settings", "--reset", "--history-limit", "7"); out != "queue settings: defaults; run settings: history limit 7\n" {
		t.Fatalf("reset and set: %q", out)
	}
	runOf := func(out string) int {
		t.Helper()
		var session string
		var run int
		if _, err := fmt.Sscanf(out, "sent: session %s run %d", &session, &run); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		return run
	}
	first := runOf(pub("settings", "--reset", "--history-limit", "6", "--no-follow"))
	if next := runOf(pub("settings", "--reset", "--history-limit", "7", "--no-follow")); next != first+1 {
		t.Fatalf("a reset with a value took %d messages, want one", next-first)
	}
	if out := pub("settings", "--reset"); out != "queue settings: defaults\n" {
		t.Fatalf("reset: %q", out)
	}
	for _, bad := range [][]string{{"--thinking", "max"}, {"--auth-profile", "a b"}, {"--model", "echo"}, {"--deny-tools", "a/b"}, {"--history-limit", "-1"}} {
		if _, _, err := publisher(t, append([]string{"settings", "--nats-url", url, "--session", "r"}, bad...)...); err == nil || !strings.Contains(err.Error(), "runSettings.") {
			t.Fatalf("%v: %v", bad, err)
		}
	}
}

// TestClientToolRoundTrip: send offers tools from a file; the run stops
// with the model's call, listed on stdout; send --tool-result answers it.
func TestClientToolRoundTrip(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	tools := t.TempDir() + "/tools.json"
	if err := os.WriteFile(tools, []byte(`[{"name":"weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	script := `#script {"replies":[{"toolCalls":[{"id":"call_1","name":"weather","arguments":{"city":"Lisbon"}}]},{"text":"It is sunny in Lisbon."}]}`
	out, stderr, err := publisher(t, "send", "--nats-url", url, "--session", "tools", "--model", "scripted/script", "--tool-file", tools, script)
	if err != nil {
		t.Fatal(err)
	}
	if out != "⏸ waiting for client tool results:\n  call_1  weather({\"city\":\"Lisbon\"})\n" || !strings.Contains(stderr, "--tool-result call_1=TEXT") {
		t.Fatalf("stdout %q\nstderr %q", out, stderr)
	}
	out, _, err = publisher(t, "send", "--nats-url", url, "--session", "tools", "--model", "scripted/script", "--tool-file", tools, "--tool-result", "call_1=22°C, clear")
	if err != nil || out != "It is sunny in Lisbon.\n" {
		t.Fatalf("answer: %q, %v", out, err)
	}
	// The history shows the call and its result, one line each (it
	// showed an empty assistant reply).
	out, _, err = publisher(t, "history", "--nats-url", url, "--session", "tools")
	for _, want := range []string{"\n  → weather {\"city\":\"Lisbon\"} [call_1]\n", "\n  ← weather result [call_1]: 22°C, clear\n", "): It is sunny in Lisbon.\n"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("history lacks %q: %v\n%s", want, err, out)
		}
	}
}

// TestRunsListsWhatRuns: a slow turn shows up in `publisher runs` with its
// session, run and worker while it runs, and is gone once it ended.
func TestRunsListsWhatRuns(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	out, _, err := publisher(t, "runs", "--nats-url", url)
	if err != nil || strings.TrimSpace(out) != "no runs" {
		t.Fatalf("idle fleet: %q, %v", out, err)
	}
	// About five seconds of turn: the polls below must catch it running
	// even when each of them is slow on a busy box.
	script := `#script {"replies":[{"text":"slow answer","chunks":20,"delayMs":250}]}`
	out, _, err = publisher(t, "send", "--nats-url", url, "--session", "busy", "--model", "scripted/script", "--no-follow", script)
	if err != nil {
		t.Fatal(err)
	}
	runID := lastField(out) // "sent: session busy run 1"
	var listed string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if listed, _, _ = publisher(t, "runs", "--nats-url", url, "--json"); strings.Contains(listed, `"session":"busy"`) {
			break
		}
	}
	if !strings.Contains(listed, `"session":"busy"`) || !strings.Contains(listed, `"phase":"running"`) ||
		!strings.Contains(listed, `"runId":"`+runID+`"`) || !strings.Contains(listed, `"worker":"w-`) {
		t.Fatalf("runs while busy: %q (run %q)", listed, runID)
	}
	if _, _, err := publisher(t, "follow", "--nats-url", url, "--session", "busy", "--run", runID); err != nil {
		t.Fatal(err)
	}
	// The entry is removed right after the turn is committed.
	var after string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if after, _, err = publisher(t, "runs", "--nats-url", url); err != nil || strings.TrimSpace(after) == "no runs" {
			break
		}
	}
	if err != nil || strings.TrimSpace(after) != "no runs" {
		t.Fatalf("after the run: %q, %v", after, err)
	}
}

func lastField(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return s
	}
	return f[len(f)-1]
}

// TestSendWithoutAWorkerSaysSo: on a server where a fleet ran but no worker
// runs now, send stores the message, says after a few seconds that no
// worker runs, and at --timeout says how to follow the run later.
func TestSendWithoutAWorkerSaysSo(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, srv.URL))
	if _, err := lanes.EnsureStreams(t.Context(), js, lanes.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := publisher(t, "send", "--nats-url", srv.URL, "--session", "lonely", "--timeout", "4s", "hello?")
	if err == nil || !strings.Contains(err.Error(), "no worker ran it before --timeout") || !strings.Contains(err.Error(), "publisher follow --session lonely --run 1") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(stderr, "no worker is running: run 1 is stored") {
		t.Fatalf("stderr = %q", stderr)
	}
}

// TestFollowUnknownRun: following a run the session does not have fails at
// once with a clear error instead of waiting for --timeout.
func TestFollowUnknownRun(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	start := time.Now()
	_, _, err := publisher(t, "follow", "--nats-url", url, "--session", "s", "--run", "4242")
	if err == nil || !strings.Contains(err.Error(), "unknown run") || time.Since(start) > 20*time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
}

// TestCredentialsAndRoles: a sender's credentials from the environment (the
// nats CLI's variables) or from flags send and follow its own session;
// runs needs the admin role and says so; wrong credentials are named.
func TestCredentialsAndRoles(t *testing.T) {
	t.Parallel()
	url := startUsersServer(t, "alice")
	startWorkerOn(t, strings.Replace(url, "nats://", "nats://worker:w@", 1))

	env := map[string]string{"NATS_URL": url, "NATS_USER": "alice", "NATS_PASSWORD": "alice", "NATS_INBOX_PREFIX": "_INBOX_alice"}
	out, _, err := publisherEnv(t, env, "send", "--session", "alice", "hi")
	if err != nil || out != "echo: hi\n" {
		t.Fatalf("send with env credentials: %q, %v", out, err)
	}
	out, _, err = publisher(t, "history", "--nats-url", url, "--user", "alice", "--password", "alice", "--inbox-prefix", "_INBOX_alice", "--session", "alice")
	if err != nil || !strings.Contains(out, "user: hi") {
		t.Fatalf("history with flag credentials: %q, %v", out, err)
	}
	if _, _, err := publisherEnv(t, env, "runs"); err == nil || !strings.Contains(err.Error(), "admin role") {
		t.Fatalf("runs as a sender: %v", err)
	}
	if _, _, err := publisherEnv(t, env, "history", "--session", "bob"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("another session: %v", err)
	}
	if _, _, err := publisherEnv(t, env, "history", "--session", "alice", "--password", "wrong"); err == nil || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("wrong password: %v", err)
	}
}

// startWorkerOn runs a scripted fleet member on the server at url.
func startWorkerOn(t *testing.T, url string) *fleet.Member {
	t.Helper()
	m, err := fleet.Start(t.Context(), fleet.Config{NATSURL: url, Scripted: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

func publisherEnv(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = runEnv(ctx, args, &out, &errb, func(k string) string { return env[k] })
	return out.String(), errb.String(), err
}

// startUsersServer starts a JetStream server with a worker user (allowed
// everything) and sender users allowed their own session's subjects only.
func startUsersServer(t *testing.T, senders ...string) string {
	t.Helper()
	users := []*server.User{{Username: "worker", Password: "w"}}
	for _, s := range senders {
		users = append(users, &server.User{Username: s, Password: s, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"agent.in." + s, "agent.svc." + s + ".>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"agent.ev." + s + ".>", "_INBOX_" + s + ".>"}},
		}})
	}
	s, err := server.NewServer(&server.Options{ServerName: "users", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true,
		NoSigs: true, JetStream: true, StoreDir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

// TestStopCommand: stop ends the session's running turn (a scripted reply
// that would stream for minutes) and prints what it stopped.
func TestStopCommand(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	cl, err := lanefleet.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	slow := `#script {"replies":[{"text":"` + strings.Repeat("word ", 1000) + `","chunks":1000,"delayMs":200}]}`
	r, err := cl.Send(t.Context(), "halt", slow, lanefleet.WithModel("scripted/script"))
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range r.Events(t.Context()) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamAssistant {
			break // the turn runs
		}
	}
	out, _, err := publisher(t, "stop", "--nats-url", url, "--session", "halt")
	if want := "stopped run " + r.ID + "\n"; err != nil || out != want {
		t.Fatalf("stop: %q, %v; want %q", out, err, want)
	}
	var re *lanefleet.RunError
	if _, err := r.Wait(t.Context()); !errors.As(err, &re) || re.Kind != events.KindInterrupted {
		t.Fatalf("stopped run: %v", err)
	}
	out, _, err = publisher(t, "stop", "--nats-url", url, "--session", "halt")
	if err != nil || out != "nothing was running\n" {
		t.Fatalf("second stop: %q, %v", out, err)
	}
}

// TestSettingsUnreadable: a session whose stored settings record cannot be
// read shows the defaults and says why, in text and in JSON, and a reset
// replaces the record.
func TestSettingsUnreadable(t *testing.T) {
	t.Parallel()
	m, url := runFleet(t)
	token, err := events.KeyToken("broken")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := m.Lanes.Acquire(t.Context(), token, kvstore.LeaseInfo{Worker: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.PutSettings(t.Context(), []byte(`{"mode":"sideways"}`)); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	out, _, err := publisher(t, "settings", "--nats-url", url, "--session", "broken")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `unreadable: the stored settings (`) || !strings.Contains(out, `sideways`) || !strings.Contains(out, "in force:  mode followup") {
		t.Fatalf("settings of a session with an unreadable record:\n%s", out)
	}
	out, _, err = publisher(t, "settings", "--json", "--nats-url", url, "--session", "broken")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Unreadable string }
	if err := json.Unmarshal([]byte(out), &got); err != nil || !strings.Contains(got.Unreadable, "sideways") {
		t.Fatalf("--json: %v, %s", err, out)
	}
	if _, _, err := publisher(t, "settings", "--nats-url", url, "--session", "broken", "--reset", "--mode", "collect"); err != nil {
		t.Fatal(err)
	}
	out, _, err = publisher(t, "settings", "--nats-url", url, "--session", "broken")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "unreadable") || !strings.Contains(out, "mode collect") {
		t.Fatalf("after a reset:\n%s", out)
	}
}

// TestSendToAFullLane: a send to a session whose lane holds as many
// messages as the fleet allows one session fails at once, saying so, how
// many wait and where to see them; another session's send goes through.
func TestSendToAFullLane(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	m, err := fleet.Start(t.Context(), fleet.Config{NATSURL: srv.URL, Scripted: true, Logger: zerolog.Nop(), Limits: fleet.Limits{LaneMessages: 4}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	slow := `#script {"replies":[{"text":"slow","chunks":600,"delayMs":100}]}`
	if _, _, err := publisher(t, "send", "--nats-url", srv.URL, "--session", "flood", "--model", "scripted/script", "--no-follow", slow); err != nil {
		t.Fatal(err)
	}
	var refused error
	for i := 0; i < 10 && refused == nil; i++ {
		_, _, refused = publisher(t, "send", "--nats-url", srv.URL, "--session", "flood", "--no-follow", fmt.Sprintf("more %d", i))
	}
	for _, want := range []string{"lane is full", `messages of session "flood" wait for their turns`, "publisher backlog --session flood"} {
		if refused == nil || !strings.Contains(refused.Error(), want) {
			t.Fatalf("send to the full lane: %v, want it to say %q", refused, want)
		}
	}
	if out, _, err := publisher(t, "send", "--nats-url", srv.URL, "--session", "calm", "hello"); err != nil || !strings.Contains(out, "echo: hello") {
		t.Fatalf("another session: %q %v", out, err)
	}
}

// TestMain runs the publisher's main instead of the tests when asked
// (publisherProcess): what a user sees on a terminal, stderr included.
func TestMain(m *testing.M) {
	if os.Getenv("LANEFLEET_TEST_PUBLISHER_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// publisherProcess runs the publisher as its own process (this test binary)
// with exactly env, and returns its output and exit code.
func publisherProcess(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = []string{"LANEFLEET_TEST_PUBLISHER_MAIN=1"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// TestInboxPrefixOfTheUser: a sender with a user and password and no
// --inbox-prefix gets the inbox its permissions grant, _INBOX_<user>, as
// the worker derives its own (it got "permission denied", exit 1, for a
// message that was delivered and answered, and a retry sent it twice). A
// prefix its user may not subscribe to is refused before the message is
// sent, saying so and which prefix to use, once (nats.go printed every
// permission error a second time).
func TestInboxPrefixOfTheUser(t *testing.T) {
	t.Parallel()
	url := startUsersServer(t, "alice")
	m := startWorkerOn(t, strings.Replace(url, "nats://", "nats://worker:w@", 1))
	env := map[string]string{"NATS_URL": url, "NATS_USER": "alice", "NATS_PASSWORD": "alice"}
	out, _, err := publisherEnv(t, env, "send", "--session", "alice", "hi")
	if err != nil || out != "echo: hi\n" {
		t.Fatalf("send without --inbox-prefix: %q, %v", out, err)
	}
	out, _, err = publisher(t, "history", "--nats-url", url, "--user", "alice", "--password", "alice", "--session", "alice")
	if err != nil || !strings.Contains(out, "user: hi") {
		t.Fatalf("history without --inbox-prefix: %q, %v", out, err)
	}

	stored := func() uint64 {
		st, err := m.JS.Stream(t.Context(), events.InboundStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := stored()
	env["NATS_INBOX_PREFIX"] = "_INBOX"
	_, stderr, code := publisherProcess(t, env, "send", "--session", "alice", "again")
	t.Log(stderr)
	if code != 1 || !strings.Contains(stderr, "nothing was sent") || !strings.Contains(stderr, "--inbox-prefix _INBOX_alice") {
		t.Fatalf("send under a refused inbox: exit %d\n%s", code, stderr)
	}
	if n := strings.Count(stderr, "Permissions Violation"); n != 1 {
		t.Errorf("the permission error is printed %d times", n)
	}
	if after := stored(); after != before {
		t.Errorf("the refused send stored a message (stream sequence %d, was %d)", after, before)
	}
}
