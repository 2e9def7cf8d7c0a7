package lanes

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
)

// TestHoldsAsTrigger: which delivery of a held lane means its owner stopped
// keeping its trigger alive.
func TestHoldsAsTrigger(t *testing.T) {
	t.Parallel()
	md := func(seq, delivered uint64) *jetstream.MsgMetadata {
		return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: seq}, NumDelivered: delivered}
	}
	for _, c := range []struct {
		name   string
		holder kvstore.LeaseInfo
		md     *jetstream.MsgMetadata
		want   bool
	}{
		{"the holder's trigger came back", kvstore.LeaseInfo{Trigger: 7}, md(7, 2), true},
		{"another message, first delivery", kvstore.LeaseInfo{Trigger: 7}, md(9, 1), false},
		// handed back by a busy worker, or nak'd before the lane was held
		{"another message, redelivered", kvstore.LeaseInfo{Trigger: 7}, md(9, 4), false},
		{"no trigger (sweep), first delivery", kvstore.LeaseInfo{}, md(9, 1), false},
		{"no trigger (sweep), redelivered: cannot tell", kvstore.LeaseInfo{}, md(9, 2), true},
		// the new owner of a dead worker's lane drains its messages
		{"taken over from a dead worker, its trigger redelivered", kvstore.LeaseInfo{From: "dead"}, md(9, 2), false},
	} {
		if got := holdsAsTrigger(c.holder, c.md); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFailedAttemptQuietBeforeRetry: a handler goroutine of a failed
// attempt that emits once the retry runs publishes nothing, not even a
// write the stream would refuse (a core subscriber sees those): the owner
// retired the failed attempt's emitter before the retry opened.
func TestFailedAttemptQuietBeforeRetry(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second, 10*time.Second)
	seen := make(chan *nats.Msg, 1024)
	if _, err := natstest.Connect(t, f.url).ChanSubscribe("agent.ev.quiet.*", seen); err != nil {
		t.Fatal(err)
	}
	var first *Turn
	h := &echoHandler{hook: func(turn *Turn) error {
		if turn.Attempt == 1 {
			first = turn
			return errors.New("the model went away")
		}
		// The first attempt's goroutine, still running.
		first.Emit(events.StreamAssistant, events.EventData{Delta: "late "})
		if err := first.em.AwaitAcks(context.Background()); err != nil && !errors.Is(err, fenced.ErrSuperseded) {
			return err
		}
		return nil
	}}
	f.startWorker(t, h, Config{RetryDelay: time.Millisecond})
	seq := f.publish(t, "quiet", "hi")
	newest := 0
	for _, ev := range f.runEvents(t, "quiet", seq) {
		if ev.Attempt < newest && ev.Data.Phase != events.PhaseAborted {
			t.Fatalf("event %d (%s %q) of attempt %d stored after attempt %d began", ev.Seq, ev.Stream, ev.Data.Delta, ev.Attempt, newest)
		}
		newest = max(newest, ev.Attempt)
	}
	newest = 0
	for {
		var m *nats.Msg
		select {
		case m = <-seen:
		case <-time.After(30 * time.Second):
			t.Fatal("a core subscriber saw no final event")
		}
		ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Attempt < newest && ev.Data.Phase != events.PhaseAborted {
			t.Fatalf("a core subscriber saw event %d (%s %q) of attempt %d after attempt %d began", ev.Seq, ev.Stream, ev.Data.Delta, ev.Attempt, newest)
		}
		newest = max(newest, ev.Attempt)
		if ev.Terminal() {
			return
		}
	}
}
