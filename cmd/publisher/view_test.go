package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// handOver is a run whose first attempt streamed "Looking" before its
// worker stopped; the second attempt answered "Done.".
var handOver = []events.Event{
	{Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseStart}},
	{Stream: events.StreamThinking, Data: events.EventData{Delta: "Let me think.\nThe user"}},
	{Stream: events.StreamThinking, Data: events.EventData{Delta: " wants files."}},
	{Stream: events.StreamAssistant, Data: events.EventData{Delta: "Looking", Text: "Looking"}},
	{Stream: events.StreamTool, Data: events.EventData{Phase: events.PhaseStart, Name: "read", Args: map[string]any{"path": strings.Repeat("a/", 60)}}},
	{Stream: events.StreamTool, Data: events.EventData{Phase: events.PhaseResult, Name: "read", Payload: map[string]any{"content": []any{map[string]any{"type": "text", "text": "line one\nline two"}}}}},
	{Stream: events.StreamTool, Data: events.EventData{Phase: events.PhaseStart, Name: "exec", Args: map[string]any{"cmd": "false"}}},
	{Stream: events.StreamTool, Data: events.EventData{Phase: events.PhaseResult, Name: "exec", IsError: true, Payload: "exit status 1"}},
	{Stream: events.StreamCompaction, Data: events.EventData{Phase: events.PhaseStart}},
	{Stream: events.StreamCompaction, Data: events.EventData{Phase: events.PhaseEnd, WillRetry: true}},
	{Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseAborted, Attempt: 1, Error: "the worker stopped"}},
	{Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseRestart, Attempt: 2, Worker: "w2"}},
	{Stream: events.StreamAssistant, Data: events.EventData{Delta: "Done.", Text: "Done."}},
}

// TestLiveView: stdout holds just the final reply when it is not a terminal
// (after a hand-over too); reasoning, tools, compaction, an aborted attempt
// and its restart are lines on stderr, in plain text when it is not a
// terminal.
func TestLiveView(t *testing.T) {
	t.Parallel()
	var out, notes bytes.Buffer
	v := newView(&out, &notes, "alice")
	for i := range handOver {
		v.event(&handOver[i])
	}
	if err := v.final(&events.Result{Payloads: []events.Payload{{Text: "Done."}}}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "Done.\n" {
		t.Fatalf("stdout = %q", got)
	}
	want := "┆ Let me think.\n" +
		"┆ The user wants files.\n" +
		"⚙ read({\"path\":\"" + strings.Repeat("a/", 35) + "…)\n" + // arguments clipped to 80 characters
		"  ✓ line one …\n" +
		"⚙ exec({\"cmd\":\"false\"})\n" +
		"  ✗ exit status 1\n" +
		"⟳ compacting the conversation…\n" +
		"⟳ compacted; retrying the request\n" +
		"✗ attempt 1 aborted: the worker stopped\n" +
		"↻ restarted on worker w2 (attempt 2)\n"
	if got := notes.String(); got != want {
		t.Fatalf("stderr:\n%s\nwant\n%s", got, want)
	}
}

// TestLiveReply: on a terminal the reply streams where the person looks:
// stdout when it is the terminal (both attempts show), else stderr, with
// stdout still just the final reply.
func TestLiveReply(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name            string
		onStdout        bool
		wantOut, inNote string
	}{
		// The notes' lines (on the same terminal) come between the attempts.
		{"stdout is the terminal", true, "LookingDone.\n", "\n⚙ read"},
		{"stderr is the terminal", false, "Done.\n", "Looking\n⚙ read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, notes bytes.Buffer
			v := newView(&out, &notes, "alice")
			if tt.onStdout {
				// A terminal's stdout and stderr share one line.
				v.live, v.notes.atStart = v.out, v.out.atStart
			} else {
				v.live = v.notes
			}
			for i := range handOver {
				v.event(&handOver[i])
			}
			if err := v.final(&events.Result{Payloads: []events.Payload{{Text: "Done."}}}); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.wantOut || !strings.Contains(notes.String(), tt.inNote) || !strings.HasSuffix(notes.String(), "\n") {
				t.Fatalf("stdout %q\nstderr %q", out.String(), notes.String())
			}
		})
	}
}

// TestViewPendingToolCalls: a run that stopped for client tools lists the
// calls on stdout and says how to answer them.
func TestViewPendingToolCalls(t *testing.T) {
	t.Parallel()
	var out, notes bytes.Buffer
	v := newView(&out, &notes, "agent:main:dm:1")
	err := v.final(&events.Result{Meta: events.Meta{StopReason: "tool_calls", PendingToolCalls: []events.PendingCall{
		{ID: "call_1", Name: "weather", Arguments: `{"city":"Lisbon"}`},
		{ID: "call_2", Name: "time", Arguments: `{}`},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "⏸ waiting for client tool results:\n  call_1  weather({\"city\":\"Lisbon\"})\n  call_2  time({})\n"
	if out.String() != want {
		t.Fatalf("stdout = %q", out.String())
	}
	if !strings.Contains(notes.String(), "publisher send --session agent:main:dm:1 --tool-file FILE --tool-result call_1=TEXT --tool-result call_2=TEXT") {
		t.Fatalf("stderr = %q", notes.String())
	}
}

// TestViewApprovals: a run that stopped for approval lists the calls and
// says how to approve them (--tool-result ID=approve), without asking for
// a tool file (the tools are the worker's); client calls of the same run
// keep their own line.
func TestViewApprovals(t *testing.T) {
	t.Parallel()
	var out, notes bytes.Buffer
	v := newView(&out, &notes, "alice")
	err := v.final(&events.Result{Meta: events.Meta{StopReason: "tool_calls", PendingToolCalls: []events.PendingCall{
		{ID: "toolu_1", Name: "exec", Arguments: `{"command":"ls"}`, Approval: true},
		{ID: "call 2", Name: "weather", Arguments: `{}`},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "⏸ waiting for client tool results:\n  call 2  weather({})\n⏸ waiting for approval:\n  toolu_1  exec({\"command\":\"ls\"})\n"
	if out.String() != want {
		t.Fatalf("stdout = %q", out.String())
	}
	wantNotes := "answer with: publisher send --session alice --tool-file FILE --tool-result 'call 2=TEXT'\n" +
		"approve with: publisher send --session alice --tool-result toolu_1=approve (or ID=deny to refuse)\n"
	if notes.String() != wantNotes {
		t.Fatalf("stderr = %q", notes.String())
	}
}

// TestViewFailedAttempts: an attempt that failed shows why, once.
func TestViewFailedAttempts(t *testing.T) {
	t.Parallel()
	var out, notes bytes.Buffer
	v := newView(&out, &notes, "alice")
	for _, e := range []string{"attempt 1 failed: runner: tools: boom; it is retried", "the worker stopped"} {
		v.event(&events.Event{Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseAborted, Attempt: 1, Error: e}})
	}
	want := "✗ attempt 1 failed: runner: tools: boom; it is retried\n✗ attempt 1 aborted: the worker stopped\n"
	if notes.String() != want {
		t.Fatalf("stderr = %q", notes.String())
	}
}

// TestViewRetries: a provider retry's wait is a line when it starts (what
// failed and why, which retry of how many, how long) and one when it ends
// (the call is made again); a cooling profile's wait too. An older
// worker's retrying event, without the most retries, still reads.
func TestViewRetries(t *testing.T) {
	t.Parallel()
	var out, notes bytes.Buffer
	v := newView(&out, &notes, "alice")
	for _, d := range []events.EventData{
		{Phase: events.PhaseRetrying, Attempt: 1, MaxAttempts: 3, DelayMs: 2000, Error: "server error (HTTP 503): Service Unavailable"},
		{Phase: events.PhaseRetry, Attempt: 1, MaxAttempts: 3},
		{Phase: events.PhaseRetrying, Attempt: 2, DelayMs: 4000, Error: "Overloaded"},
		{Phase: events.PhaseRetrying, DelayMs: 1500, Error: "every auth profile of acme is cooling down; acme:a may be used again in 1.5s"},
		{Phase: events.PhaseRetry},
	} {
		v.event(&events.Event{Stream: events.StreamLifecycle, Data: d})
	}
	want := "⏳ the model call failed: server error (HTTP 503): Service Unavailable; retry 1 of 3 in 2s\n" +
		"↻ retry 1 of 3: calling the model again\n" +
		"⏳ the model call failed: Overloaded; retry 2 in 4s\n" +
		"⏳ every auth profile of acme is cooling down; acme:a may be used again in 1.5s; calling the model in 1.5s\n" +
		"↻ calling the model now\n"
	if notes.String() != want {
		t.Fatalf("stderr:\n%s\nwant\n%s", notes.String(), want)
	}
}

// TestViewAttempts: a model attempt after a failover is a line naming
// the model, the auth profile and the reason; the run's first attempt is
// not.
func TestViewAttempts(t *testing.T) {
	t.Parallel()
	var out, notes bytes.Buffer
	v := newView(&out, &notes, "alice")
	for _, d := range []events.EventData{
		{Attempt: 1, Provider: "openai", Model: "gpt-4o", AuthProfile: "openai:a"},
		{Attempt: 2, Provider: "openai", Model: "gpt-4o", AuthProfile: "openai:b", Reason: "rate_limit"},
		{Attempt: 3, Provider: "openai", Model: "gpt-4o-mini", Hop: 1, Reason: "rate_limit"},
	} {
		v.event(&events.Event{Stream: events.StreamAttempt, Data: d})
	}
	want := "↻ retrying with openai/gpt-4o (auth profile openai:b) after rate_limit\n" +
		"↻ retrying with openai/gpt-4o-mini after rate_limit\n"
	if notes.String() != want || out.Len() != 0 {
		t.Fatalf("stderr:\n%s\nwant\n%s\nstdout %q", notes.String(), want, out.String())
	}
}

// TestViewWaits: what following says while no event comes: no worker, a
// queue, a worker that stopped answering (and within how long another
// takes over) or whose lease lapsed, and a dropped connection to NATS
// (why, for how long nats.go tries) and its return.
func TestViewWaits(t *testing.T) {
	t.Parallel()
	var out, notes bytes.Buffer
	v := newView(&out, &notes, "alice")
	for _, w := range []lanefleet.Wait{
		{State: lanefleet.RunNoWorker},
		{State: lanefleet.RunQueued},
		{State: lanefleet.RunHandOver, Worker: "w1", Within: 13200 * time.Millisecond},
		{State: lanefleet.RunHandOver},
		{State: lanefleet.RunDisconnected, Err: errors.New("EOF"), Within: 306 * time.Second},
		{State: lanefleet.RunReconnected},
		{State: lanefleet.RunDisconnected},
	} {
		v.wait("12", w)
	}
	want := "… no worker is running: run 12 is stored and runs when one starts (waiting; Ctrl-C to stop)\n" +
		"… run 12 waits on the session's lane for its turn\n" +
		"… worker w1 stopped answering (it no longer renews its lease on the session's lane): another worker takes run 12 over within 13.2s\n" +
		"… the worker running run 12 stopped, and its lease on the session's lane lapsed: the run starts again when a worker takes the lane\n" +
		"… lost the connection to NATS (EOF); reconnecting, for at most 5m6s\n" +
		"… reconnected to NATS; catching up on run 12\n" +
		"… lost the connection to NATS; reconnecting\n"
	if notes.String() != want {
		t.Fatalf("stderr:\n%s\nwant\n%s", notes.String(), want)
	}
}

func TestReadTools(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"plain":   `[{"name":"weather","description":"Weather","parameters":{"type":"object"}}]`,
		"wrapped": `{"tools":[{"name":"weather","parameters":{"type":"object"}}]}`,
		"openai":  `[{"type":"function","function":{"name":"weather","parameters":{"type":"object"}}}]`,
	} {
		path := dir + "/" + name + ".json"
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		tools, err := readTools(path)
		if err != nil || len(tools) != 1 || tools[0].Name != "weather" || tools[0].Parameters["type"] != "object" {
			t.Fatalf("%s: %+v, %v", name, tools, err)
		}
	}
	if _, err := readTools(dir + "/plain.json.missing"); err == nil {
		t.Fatal("missing file accepted")
	}
	res, err := toolResults([]string{"call_1=22°C", "call_2=a=b"}, []string{"call_3=boom"})
	if err != nil || len(res) != 3 || res[1].Text != "a=b" || !res[2].IsError || res[0].IsError {
		t.Fatalf("results %+v, %v", res, err)
	}
	if _, err := toolResults([]string{"nope"}, nil); err == nil {
		t.Fatal("a result without an id accepted")
	}
}

// TestHeartbeatOKView: a heartbeat the model acknowledged prints no reply
// on stdout, only a note on stderr.
func TestHeartbeatOKView(t *testing.T) {
	t.Parallel()
	var out, notes bytes.Buffer
	v := newView(&out, &notes, "alice")
	if err := v.final(&events.Result{Meta: events.Meta{HeartbeatOK: true}}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "" || notes.String() != "heartbeat: nothing to report\n" {
		t.Fatalf("stdout %q, stderr %q", out.String(), notes.String())
	}
}
