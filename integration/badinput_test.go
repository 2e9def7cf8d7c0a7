package integration

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestBadInput: malformed, oversized, empty and unknown-field payloads end
// their run with a clear invalid_input error event and a dead letter; hostile
// subjects from which no lane can be derived go to the dead-letter stream;
// the lane keeps working and the worker never crashes.
func TestBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	w := startMember(t, srv.URL, fleet.Config{WorkerID: "edge", MaxPayload: 2048})
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	pack := func(v any) []byte { b, _ := msgpack.Marshal(v); return b }
	tests := []struct {
		name, ct string
		data     []byte
		reason   string // substring of the error event
	}{
		{"malformed JSON", "", []byte(`{"text": "unterminated`), "malformed JSON"},
		{"malformed msgpack", "", []byte{0x82, 0xa4, 't', 'e'}, "malformed msgpack"},
		{"not an object", "", []byte("just some words"), "malformed msgpack"},
		{"oversized", "", []byte(`{"text":"` + strings.Repeat("x", 4096) + `"}`), "the limit is 2048"},
		{"empty text", "", []byte(`{"text":""}`), "text: empty"},
		{"misspelt field", "", []byte(`{"txt":"hi","colour":"blue"}`), `text: empty: a message needs text, an image or tool results (ignored unknown fields: colour, txt)`},
		{"misspelt msgpack field", events.ContentMsgpack, pack(map[string]any{"txt": "hi"}), "(ignored unknown fields: txt)"},
		{"session mismatch", "", []byte(`{"text":"hi","session":"someone-else"}`), "does not match"},
		{"future version", "", []byte(`{"v":9,"text":"hi"}`), "unsupported schema version"},
	}
	for _, tt := range tests {
		m := nats.NewMsg("agent.in.edge")
		m.Data = tt.data
		if tt.ct != "" {
			m.Header.Set(events.HeaderContentType, tt.ct)
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("%s: publish: %v", tt.name, err)
		}
		res, err := c.Run("edge", itoa(ack.Sequence)).Wait(ctx)
		var re *lanefleet.RunError
		if !errors.As(err, &re) || re.Kind != "invalid_input" || !strings.Contains(re.Message, tt.reason) {
			t.Fatalf("%s: result %+v, err %v; want invalid_input containing %q", tt.name, res, err, tt.reason)
		}
		if len(res.Payloads) != 1 || !res.Payloads[0].IsError {
			t.Fatalf("%s: payloads %+v, want one error payload", tt.name, res.Payloads)
		}
	}

	// Unknown fields beside the known ones (a newer sender's) are ignored:
	// the message runs (it was dead-lettered).
	for _, data := range [][]byte{[]byte(`{"text":"hi","colour":"blue"}`), pack(map[string]any{"text": "hi", "x": 1})} {
		ack, err := js.Publish(ctx, "agent.in.edge", data)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := c.Run("edge", itoa(ack.Sequence)).Wait(ctx); err != nil || res.Payloads[0].Text != "echo: hi" {
			t.Fatalf("a message with an unknown field: %+v, %v", res, err)
		}
	}

	// Subjects no lane can be derived from: dead-lettered with the reason.
	for _, subj := range []string{"agent.in.=!!!", "agent.in.=YWxpY2U", "agent.in.=_w"} {
		if _, err := js.Publish(ctx, subj, []byte(`{"text":"hi"}`)); err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
	}
	// Hostile keys through the client are encoded, never injected.
	for _, key := range []string{"a.b.>", "*", "> x", "agent.in.edge", "tab\tkey"} {
		r, err := c.Send(ctx, key, "still fine")
		if err != nil {
			t.Fatalf("send to %q: %v", key, err)
		}
		if _, err := r.Wait(ctx); err != nil {
			t.Fatalf("run for %q: %v", key, err)
		}
	}
	// The lane keeps working after all that.
	r, err := c.Send(ctx, "edge", "are you still there?")
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Wait(ctx)
	if err != nil || res.Payloads[0].Text != "echo: are you still there?" {
		t.Fatalf("good message after bad ones: %+v, %v", res, err)
	}
	waitDrained(t, js, 3*time.Minute)

	dlq, err := js.Stream(ctx, events.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctx, jetstream.WithSubjectFilter(events.DeadPrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Subjects["agent.dlq.bad-lane"] != 3 || info.State.Subjects["agent.dlq.invalid"] != uint64(len(tests)) {
		t.Fatalf("dead letters by subject = %v, want 3 bad-lane and %d invalid", info.State.Subjects, len(tests))
	}
	// The three hostile subjects are dead-lettered in whatever order the
	// workers met them: each with its reason and original subject.
	var subjects []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		dead, err := dlq.GetMsg(ctx, seq)
		if err != nil || dead.Subject != "agent.dlq.bad-lane" {
			continue
		}
		if dead.Header.Get(events.HeaderError) == "" {
			t.Fatalf("dead letter without a reason: %v", dead.Header)
		}
		subjects = append(subjects, dead.Header.Get(events.HeaderSubject))
	}
	if len(subjects) != 3 || !slices.Contains(subjects, "agent.in.=_w") {
		t.Fatalf("bad-lane dead letters for %q", subjects)
	}
	// History shows only the good turns of the lane (two with unknown
	// fields, then the last).
	hist, err := c.History(ctx, "edge")
	if err != nil || len(hist) != 6 {
		t.Fatalf("history = %d entries, %v; want the three good turns", len(hist), err)
	}
	if st := w.m.Worker.Stats(); st.DeadLetters.Load() != int64(3+len(tests)) {
		t.Fatalf("worker dead letters = %d", st.DeadLetters.Load())
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestCollectThroughTheClient: messages sent with mode collect while the
// session is busy end in one merged turn; Wait on any of them returns that
// turn's result.
func TestCollectThroughTheClient(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "collector", ScriptedDelay: 40 * time.Millisecond})
	nc := natstest.Connect(t, srv.URL)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// A long first turn (many words, 40 ms each) keeps the session busy.
	first, err := c.Send(ctx, "col", strings.Repeat("word ", 40))
	if err != nil {
		t.Fatal(err)
	}
	var runs []*lanefleet.Run
	for _, text := range []string{"a", "b", "c", "d", "e"} {
		r, err := c.Send(ctx, "col", text, lanefleet.WithMode("collect"))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if _, err := first.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, r := range runs {
		res, err := r.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, res.Payloads[0].Text)
	}
	for i := range texts {
		if texts[i] != texts[0] || !strings.Contains(texts[0], "Queued #5\ne") {
			t.Fatalf("collected replies differ or lack the merged prompt: %q", texts)
		}
	}
	hist, _ := c.History(ctx, "col")
	if len(hist) != 4 {
		t.Fatalf("history has %d entries, want 2 turns (the long one, the merged one)", len(hist))
	}
}
