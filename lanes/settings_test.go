package lanes

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
)

// settingsHandler answers like echoHandler and remembers, per prompt, the
// run settings and the session state each attempt was handed. Each turn
// reports a usage of 10 input tokens costing 0.01 and the profile
// "p-<prompt>"; the prompts in failOnce fail their first attempt.
type settingsHandler struct {
	echoHandler
	mu       sync.Mutex
	settings map[string][]string
	states   map[string][]events.SessionState
	failOnce map[string]bool
}

func (h *settingsHandler) HandleTurn(ctx context.Context, t *Turn) (*Outcome, error) {
	text := t.Inbound.Text
	h.mu.Lock()
	if h.settings == nil {
		h.settings, h.states = map[string][]string{}, map[string][]events.SessionState{}
	}
	h.settings[text] = append(h.settings[text], t.Settings.String())
	h.states[text] = append(h.states[text], t.State)
	fail := h.failOnce[text] && len(h.states[text]) == 1
	h.mu.Unlock()
	if fail {
		return nil, errors.New("first attempt fails")
	}
	out, err := h.echoHandler.HandleTurn(ctx, t)
	if err != nil {
		return nil, err
	}
	out.Usage = &events.UsageMeta{Input: 10, Total: 10, Cost: &events.CostMeta{Input: 0.01, Total: 0.01}}
	out.AuthProfile = "p-" + text
	return out, nil
}

func (h *settingsHandler) seen(text string) ([]string, []events.SessionState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.settings[text], h.states[text]
}

// TestRunSettingsApplyBetweenMessages: run settings sent while the session
// is busy apply exactly to the messages sent after them, and a reset to
// the ones after it; the settings message's run says what is in force, and
// the lanes bucket keeps queue and run settings in one record.
func TestRunSettingsApplyBetweenMessages(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	h := &settingsHandler{}
	h.hook = blockingHandler(started, release).hook
	f.startWorker(t, h, Config{})
	f.publish(t, "s", "hold")
	<-started
	f.publish(t, "s", "a")
	set := f.publishIn(t, "s", &events.Inbound{QueueSettings: &events.QueueSettings{Cap: 4},
		RunSettings: &events.RunSettings{Model: "acme/m1", Thinking: "HIGH", Tools: &events.ToolPolicy{Deny: []string{"exec"}}}})
	f.publish(t, "s", "b")
	reset := f.publishIn(t, "s", &events.Inbound{RunSettings: &events.RunSettings{Reset: true, HistoryLimit: 3}})
	last := f.publish(t, "s", "c")
	close(release)
	f.waitFinal(t, "s", last)
	want := map[string]string{"hold": "defaults", "a": "defaults", "b": "model acme/m1, thinking high, tools deny exec", "c": "history limit 3"}
	for text, w := range want {
		if got, _ := h.seen(text); len(got) != 1 || got[0] != w {
			t.Errorf("turn %q ran with run settings %q, want %q", text, got, w)
		}
	}
	if got := f.waitFinal(t, "s", set).Data.Result.Payloads[0].Text; got != "queue settings: cap 4; run settings: model acme/m1, thinking high, tools deny exec" {
		t.Errorf("settings run says %q", got)
	}
	if got := f.waitFinal(t, "s", reset).Data.Result.Payloads[0].Text; got != "queue settings: cap 4; run settings: history limit 3" {
		t.Errorf("reset run says %q", got)
	}
	raw, err := f.lanes.Settings(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"cap":4,"run":{"historyLimit":3}}` {
		t.Fatalf("stored settings = %s", raw)
	}
}

// TestSessionStateOncePerCommittedTurn: each committed turn adds its usage
// to the session's running total once (an attempt that failed and was
// retried counts once), the profile that answered is handed to the next
// turn, a settings message in between keeps the state, and a new owner on
// another worker reads it from the lane's newest record. The final event
// of each turn carries the state after it.
func TestSessionStateOncePerCommittedTurn(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	h := &settingsHandler{failOnce: map[string]bool{"two": true}}
	stop := f.startWorker(t, h, Config{RetryDelay: time.Millisecond})
	one := f.publish(t, "u", "one")
	if s := f.waitFinal(t, "u", one).Data.Result.Meta.Session; s == nil || s.Turns != 1 || s.Usage.Input != 10 || s.AuthProfile != "p-one" {
		t.Fatalf("state after one = %+v", s)
	}
	set := f.publishIn(t, "u", &events.Inbound{RunSettings: &events.RunSettings{Thinking: "low"}})
	if s := f.waitFinal(t, "u", set).Data.Result.Meta.Session; s != nil {
		t.Fatalf("a settings run reports a state: %+v", s)
	}
	stop()
	f.startWorker(t, h, Config{RetryDelay: time.Millisecond})
	f.publish(t, "u", "two")
	three := f.publish(t, "u", "three")
	s := f.waitFinal(t, "u", three).Data.Result.Meta.Session
	if s == nil || s.Turns != 3 || s.Usage.Input != 30 || s.Usage.Total != 30 || s.AuthProfile != "p-three" ||
		s.Usage.Cost == nil || s.Usage.Cost.Total < 0.0299 || s.Usage.Cost.Total > 0.0301 {
		t.Fatalf("state after three = %+v (usage %+v)", s, s.Usage)
	}
	_, states := h.seen("two")
	if len(states) != 2 {
		t.Fatalf("turn two ran %d times, want 2 (a failed attempt, then the committed one)", len(states))
	}
	for i, st := range states {
		if st.Turns != 1 || st.Usage == nil || st.Usage.Input != 10 || st.AuthProfile != "p-one" {
			t.Fatalf("attempt %d of two was handed %+v, want the state after one", i+1, st)
		}
	}
	tok, _ := events.KeyToken("u")
	cur, err := f.lanes.Cursor(t.Context(), tok)
	if err != nil || cur.State == nil || cur.State.Turns != 3 || cur.State.AuthProfile != "p-three" {
		t.Fatalf("cursor state = %+v, %v", cur.State, err)
	}
}

// TestSettingsKnownWithoutARead: a lane without a transcript has no
// settings to read, and a worker that committed a lane's newest record
// knows its settings and takes the lane again without reading them;
// once another worker has stored a record (and settings) it reads them, and
// every turn runs with the settings in force.
func TestSettingsKnownWithoutARead(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	const key = "known"
	tok, _ := events.KeyToken(key)
	h := &settingsHandler{}
	f.startWorker(t, h, Config{})
	nc := natstest.Connect(t, f.url)
	var reads atomic.Int64
	// kvstore.Settings is a Direct Get of the key (single replica).
	sub, err := nc.Subscribe("$JS.API.DIRECT.GET.KV_"+kvstore.DefaultBucket+".$KV."+kvstore.DefaultBucket+"."+tok+".settings",
		func(*nats.Msg) { reads.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f.waitFinal(t, key, f.publishIn(t, key, &events.Inbound{RunSettings: &events.RunSettings{Model: "acme/m1"}}))
	for _, text := range []string{"a", "b", "c"} {
		f.waitFinal(t, key, f.publish(t, key, text))
		if got, _ := h.seen(text); len(got) != 1 || got[0] != "model acme/m1" {
			t.Fatalf("turn %q ran with %q", text, got)
		}
	}
	// The first owner found a lane without a transcript (no settings can
	// be stored), the later ones knew them: no read.
	if n := reads.Load(); n != 0 {
		t.Fatalf("settings read %d times over four owners of one worker, want 0", n)
	}

	// Another worker changes them (and commits a record): read again.
	lease := f.takeLane(t, tok)
	if err := lease.PutSettings(t.Context(), []byte(`{"run":{"model":"acme/m2"}}`)); err != nil {
		t.Fatal(err)
	}
	pos := f.publish(t, "filler", "x")
	f.waitFinal(t, "filler", pos)
	cur, err := f.lanes.Cursor(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.PutRecord(t.Context(), kvstore.Record{InboundSeq: pos, RunID: "elsewhere", SessionID: cur.SessionID}); err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(t.Context())
	f.waitFinal(t, key, f.publish(t, key, "d"))
	if got, _ := h.seen("d"); len(got) != 1 || got[0] != "model acme/m2" {
		t.Fatalf("after another worker's settings, turn d ran with %q", got)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("settings read %d times, want 1 (after another worker's record)", n)
	}
}

// TestNextStateApprovals: the calls waiting for approval are those the
// final event of the last turn that added to the transcript left pending
// for approval; a turn that adds nothing (settings, a refusal) keeps them,
// one that adds anything replaces them.
func TestNextStateApprovals(t *testing.T) {
	t.Parallel()
	entries := []message.Entry{{Type: message.EntryMessage, ID: "e1"}}
	pending := func(calls ...events.PendingCall) *events.Result {
		return &events.Result{Meta: events.Meta{StopReason: "tool_calls", PendingToolCalls: calls}}
	}
	waiting := &events.SessionState{Approvals: []events.ApprovalCall{{ID: "c1", Name: "exec"}}}
	for _, tc := range []struct {
		name string
		prev *events.SessionState
		out  Outcome
		want []events.ApprovalCall
	}{
		{"a turn leaves a call waiting", nil, Outcome{Entries: entries, Result: pending(events.PendingCall{ID: "c1", Name: "exec", Approval: true})}, waiting.Approvals},
		// A client tool's call waits for its result, not an approval.
		{"a client call is no approval", nil, Outcome{Entries: entries, Result: pending(events.PendingCall{ID: "c2", Name: "weather"})}, nil},
		{"a settings turn keeps them", waiting, Outcome{Result: &events.Result{}}, waiting.Approvals},
		{"a refused message keeps them", waiting, Outcome{Result: &events.Result{Meta: events.Meta{Error: &events.RunError{Kind: events.KindInvalidInput}}}}, waiting.Approvals},
		{"an answer clears them", waiting, Outcome{Entries: entries, Result: &events.Result{}}, nil},
		{"a cut turn's progress clears them", waiting, Outcome{Entries: entries}, nil},
		{"a new call replaces them", waiting, Outcome{Entries: entries, Result: pending(events.PendingCall{ID: "c3", Name: "write", Approval: true})}, []events.ApprovalCall{{ID: "c3", Name: "write"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			next := nextState(tc.prev, &tc.out)
			var got []events.ApprovalCall
			if next != nil {
				got = next.Approvals
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("approvals = %+v, want %+v", got, tc.want)
			}
		})
	}
}
