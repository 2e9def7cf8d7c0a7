package lanes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestDeadLetterDropsJetStreamHeaders: an invalid message whose sender set
// JetStream control headers (meant for the inbound stream) is still
// dead-lettered: the dead letter keeps the sender's own headers and none
// of the Nats-* ones, which the dead-letter stream would otherwise apply
// and refuse the write for.
func TestDeadLetterDropsJetStreamHeaders(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	f.startWorker(t, &echoHandler{}, Config{})

	subj, _ := events.InboundSubject("hostile")
	m := nats.NewMsg(subj)
	m.Data = []byte("{not json")
	m.Header.Set(events.HeaderContentType, events.ContentJSON)
	m.Header.Set("X-Trace", "abc")
	// Both hold for the inbound stream; the first fails on the dead-letter one.
	m.Header.Set(jetstream.ExpectedStreamHeader, events.InboundStream)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	ack, err := f.js.PublishMsg(t.Context(), m, jetstream.WithMsgID("hostile-1"))
	if err != nil {
		t.Fatal(err)
	}
	if e := f.waitFinal(t, "hostile", ack.Sequence).Data.Result.Meta.Error; e == nil || e.Kind != "invalid_input" {
		t.Fatalf("final error = %+v, want invalid_input", e)
	}
	info, err := f.streams.Dead.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("dead letters = %d, want 1", info.State.Msgs)
	}
	dl, err := f.streams.Dead.GetMsg(t.Context(), info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	if dl.Header.Get("X-Trace") != "abc" || dl.Header.Get(events.HeaderSubject) != subj || string(dl.Data) != "{not json" {
		t.Fatalf("dead letter = %v %q", dl.Header, dl.Data)
	}
	for k := range dl.Header {
		if len(k) >= 5 && k[:5] == "Nats-" {
			t.Errorf("dead letter kept header %s", k)
		}
	}
}

// TestSubjectThatIsNoLaneDeadLettered: a raw publish to agent.in.a.b (more
// tokens than a lane has) is stored by the inbound stream and
// dead-lettered as bad-lane by dispatch, not dropped unseen; the inbound
// stream keeps nothing of it, and the worker counts it by reason.
func TestSubjectThatIsNoLaneDeadLettered(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	nc := natstest.Connect(t, f.url)
	js, _ := jetstream.New(nc)
	streams, err := EnsureStreams(t.Context(), js, StreamConfig{AckWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(js, streams, f.lanes, &echoHandler{}, Config{Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ack, err := f.js.Publish(t.Context(), events.InboundPrefix+"a.b", []byte(`{"text":"hi"}`))
	if err != nil {
		t.Fatalf("agent.in.a.b is not stored: %v", err)
	}
	dead := waitDeadLetter(t, f.streams.Dead, "agent.dlq.bad-lane")
	if dead.Header.Get(events.HeaderSubject) != "agent.in.a.b" || dead.Header.Get(events.HeaderSeq) != fmt.Sprint(ack.Sequence) || string(dead.Data) != `{"text":"hi"}` {
		t.Fatalf("dead letter %v %q", dead.Header, dead.Data)
	}
	// The message is deleted from the inbound stream right after its dead
	// letter is stored: wait for it (the deadline only detects a hang).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := f.streams.Inbound.GetMsg(t.Context(), ack.Sequence)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbound message still stored: %v", err)
		}
	}
	if got := w.Stats().DeadLettersByReason(); got["bad-lane"] != 1 {
		t.Fatalf("dead letters by reason = %v", got)
	}
}

// waitDeadLetter waits for the first dead letter on subject.
func waitDeadLetter(t *testing.T, dead jetstream.Stream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cons, err := dead.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(25 * time.Second))
	if err != nil {
		t.Fatalf("no dead letter on %s: %v", subject, err)
	}
	md, _ := m.Metadata()
	raw, err := dead.GetMsg(ctx, md.Sequence.Stream)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestFailedAttemptSaysWhy: a turn whose handler fails every time shows
// its sender why, attempt by attempt (on one line, bounded), and the final
// error and the dead letter name the last attempt's error, not only that
// the turn was started too often.
func TestFailedAttemptSaysWhy(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	long := strings.Repeat("x", 2*maxFailureText)
	h := &echoHandler{hook: func(*Turn) error {
		return fmt.Errorf("runner: tools: workspace %q:\nnot a directory %s", "/srv/ws", long)
	}}
	f.startWorker(t, h, Config{RetryDelay: time.Millisecond, MaxAttempts: 2})
	seq := f.publish(t, "failing", "hi")
	var aborted []string
	evs := f.runEvents(t, "failing", seq)
	for _, ev := range evs {
		if ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseAborted {
			aborted = append(aborted, ev.Data.Error)
		}
	}
	cause := `runner: tools: workspace "/srv/ws": not a directory ` + long[:maxFailureText-len(`runner: tools: workspace "/srv/ws": not a directory `)] + "…"
	want := []string{"attempt 1 failed: " + cause + "; it is retried", "attempt 2 failed: " + cause}
	if !slices.Equal(aborted, want) {
		t.Fatalf("aborted events say\n%q\nwant\n%q", aborted, want)
	}
	final := evs[len(evs)-1].Data.Result.Meta.Error
	if final == nil || final.Kind != "poison_message" || !strings.Contains(final.Message, "turn started 2 times without finishing; attempt 2 failed: "+cause) {
		t.Fatalf("final error = %+v", final)
	}
	dl := waitDeadLetter(t, f.streams.Dead, "agent.dlq.poison")
	if got := dl.Header.Get(events.HeaderError); got != "turn started 2 times without finishing; attempt 2 failed: "+cause {
		t.Fatalf("dead letter error = %q", got)
	}
}
