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
	for k, v := range dl.Header {
		if len(k) >= 5 && k[:5] == "Nats-" && (k != events.HeaderMsgID || v[0] != fmt.Sprintf("dead-%d", ack.Sequence)) {
			t.Errorf("dead letter kept header %s %q", k, v)
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
	waitFor(t, "the inbound message deleted", func() bool {
		_, err := f.streams.Inbound.GetMsg(t.Context(), ack.Sequence)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
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

// TestFullDeadLetterStreamKeepsMessage: when the dead-letter stream is
// full (a sender filled it), a message that must be dead-lettered (one that
// does not decode, one on a subject that is no lane) is neither deleted nor
// ended: it stays where it is, the worker counts the failure and tries it
// again later; once the dead-letter stream has room it is dead-lettered and
// ended as usual. (Before, it was deleted from the inbound stream while the
// log said it stayed.)
func TestFullDeadLetterStreamKeepsMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, subject, reason string
		data                  string
	}{
		{"invalid", events.InboundPrefix + "full", "invalid", "{not json"},
		{"poison", events.InboundPrefix + "full", "poison", `{"text":"poison"}`},
		{"bad-lane", events.InboundPrefix + "a.b", "bad-lane", `{"text":"hi"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFleetWith(t, StreamConfig{AckWait: 5 * time.Second, DeadMaxBytes: 4096}, 5*time.Second)
			// Fill the dead-letter stream the way a hostile sender's
			// dead letters would.
			for n := 4000; n > 0; n /= 2 {
				filler := nats.NewMsg(events.DeadPrefix + "invalid")
				filler.Data = make([]byte, n)
				_, _ = f.js.PublishMsg(t.Context(), filler) // as much as fits
			}
			h := &echoHandler{hook: func(t *Turn) error {
				if t.Inbound.Text == "poison" {
					panic("this message always kills its turn")
				}
				return nil
			}}
			w := f.newWorker(t, natstest.Connect(t, f.url), h, Config{MaxAttempts: 1, RetryDelay: time.Millisecond, deadRetry: 20 * time.Millisecond}, zerolog.ErrorLevel)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })

			ack, err := f.js.Publish(t.Context(), tt.subject, []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			// Tried again: it stayed.
			waitFor(t, "the message tried again", func() bool { return w.Stats().DeadLetterFailures.Load() >= 3 })
			if _, err := f.streams.Inbound.GetMsg(t.Context(), ack.Sequence); err != nil {
				t.Fatalf("the message was not kept: %v", err)
			}
			switch tt.reason {
			case "invalid":
				if ev, err := f.streams.Events.GetLastMsgForSubject(t.Context(), fmt.Sprintf("agent.ev.full.%d", ack.Sequence)); !errors.Is(err, jetstream.ErrMsgNotFound) {
					t.Fatalf("the run has an event before its dead letter is stored: %v %v", ev, err)
				}
			case "poison":
				if ev := lastEvent(t, f.streams, fmt.Sprintf("agent.ev.full.%d", ack.Sequence)); ev.Terminal() || ev.Attempt != 1 {
					t.Fatalf("the run's last event is %+v before its dead letter is stored, want its one failed attempt", ev)
				}
			}
			if got := w.Stats().DeadLettersByReason(); got[tt.reason] != 0 {
				t.Fatalf("dead letters stored = %v", got)
			}

			// Room again: dead-lettered once, and ended.
			if err := f.streams.Dead.Purge(t.Context()); err != nil {
				t.Fatal(err)
			}
			dead := waitDeadLetter(t, f.streams.Dead, events.DeadPrefix+tt.reason)
			if dead.Header.Get(events.HeaderSeq) != fmt.Sprint(ack.Sequence) || string(dead.Data) != tt.data {
				t.Fatalf("dead letter %v %q", dead.Header, dead.Data)
			}
			want := map[string]struct {
				kind    string
				attempt int
			}{"invalid": {"invalid_input", 1}, "poison": {"poison_message", 2}}
			if w, ok := want[tt.reason]; ok {
				ev := f.waitFinal(t, "full", ack.Sequence)
				if e := ev.Data.Result.Meta.Error; e == nil || e.Kind != w.kind || ev.Attempt != w.attempt {
					t.Fatalf("final = %+v attempt %d, want %s at attempt %d", ev.Data.Result.Meta, ev.Attempt, w.kind, w.attempt)
				}
			}
			waitFor(t, "the dead-lettered message deleted", func() bool {
				_, err := f.streams.Inbound.GetMsg(t.Context(), ack.Sequence)
				return errors.Is(err, jetstream.ErrMsgNotFound)
			})
			if got := w.Stats().DeadLettersByReason(); got[tt.reason] != 1 {
				t.Fatalf("dead letters stored = %v, want one %s", got, tt.reason)
			}
		})
	}
}

// lastEvent returns the last event stored on subject.
func lastEvent(t *testing.T, streams *Streams, subject string) *events.Event {
	t.Helper()
	raw, err := streams.Events.GetLastMsgForSubject(t.Context(), subject)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.DecodeEvent(raw.Header.Get(events.HeaderContentType), raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
