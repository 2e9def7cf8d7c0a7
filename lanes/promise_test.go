package lanes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// eventsOffline makes the event stream refuse every publish (it stops
// listening on agent.ev.>) until the returned function restores it.
func (f *fleet) eventsOffline(t *testing.T) (restore func()) {
	t.Helper()
	ctx := t.Context()
	info, err := f.streams.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	off := cfg
	off.Subjects = []string{"offline.events.>"}
	if _, err := f.js.UpdateStream(ctx, off); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// warnedAbout returns a channel that receives a worker's warnings whose
// message contains text (for workers started after the call).
func (f *fleet) warnedAbout(text string) <-chan string {
	ch := make(chan string, 16)
	f.logHook = zerolog.HookFunc(func(_ *zerolog.Event, level zerolog.Level, msg string) {
		if level == zerolog.WarnLevel && strings.Contains(msg, text) {
			select {
			case ch <- msg:
			default:
			}
		}
	})
	return ch
}

// waitRecord waits until the lane's turn record of seq is committed.
func (f *fleet) waitRecord(t *testing.T, key string, seq uint64) {
	t.Helper()
	tok, _ := events.KeyToken(key)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	kv, err := f.js.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, fmt.Sprintf("%s.tx.%d", tok, seq))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case e := <-w.Updates():
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				return
			}
		case <-ctx.Done():
			t.Fatalf("record %s/%d never committed", key, seq)
		}
	}
}

// finals counts the final events stored for a run.
func (f *fleet) finals(t *testing.T, key string, seq uint64) int {
	t.Helper()
	subj, _ := events.EventSubject(key, fmt.Sprint(seq))
	n := 0
	for s := uint64(1); ; {
		raw, err := f.streams.Events.GetMsg(t.Context(), s, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		s = raw.Sequence + 1
		if raw.Header.Get(events.HeaderStream) == events.StreamFinal {
			n++
		}
	}
}

// firstEventSeq is the stream sequence of a run's first stored event.
func (f *fleet) firstEventSeq(t *testing.T, key string, seq uint64) uint64 {
	t.Helper()
	subj, _ := events.EventSubject(key, fmt.Sprint(seq))
	raw, err := f.streams.Events.GetMsg(t.Context(), 1, jetstream.WithGetMsgSubject(subj))
	if err != nil {
		t.Fatal(err)
	}
	return raw.Sequence
}

// TestFinalKeptUntilStored: a turn commits while the event stream cannot
// store anything. Its owner keeps trying to publish the final event, and
// takes the lane's next message only once it is stored: the final arrives
// once, and the next run starts after it.
func TestFinalKeptUntilStored(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Minute, 5*time.Second)
	failed := f.warnedAbout("final")
	started, release := make(chan struct{}), make(chan struct{})
	f.startWorker(t, blockingHandler(started, release), Config{})
	first := f.publish(t, "promise", "hold")
	<-started
	restore := f.eventsOffline(t)
	second := f.publish(t, "promise", "next")
	close(release)
	f.waitRecord(t, "promise", first)
	t.Logf("committed while the event stream is away: %s", <-failed)
	restore()
	ev := f.waitFinal(t, "promise", first)
	if ev.Data.Result.Payloads[0].Text != "ok hold" {
		t.Fatalf("final = %+v", ev.Data.Result)
	}
	f.waitFinal(t, "promise", second)
	if n := f.finals(t, "promise", first); n != 1 {
		t.Fatalf("%d final events stored for the first run", n)
	}
	finalSeq := f.streamSeqOfFinal(t, "promise", first)
	if next := f.firstEventSeq(t, "promise", second); next < finalSeq {
		t.Fatalf("the next run started (stream seq %d) before the first run's final (%d)", next, finalSeq)
	}
}

func (f *fleet) streamSeqOfFinal(t *testing.T, key string, seq uint64) uint64 {
	t.Helper()
	subj, _ := events.EventSubject(key, fmt.Sprint(seq))
	raw, err := f.streams.Events.GetLastMsgForSubject(t.Context(), subj)
	if err != nil {
		t.Fatal(err)
	}
	return raw.Sequence
}

// TestShuttingDownWorkerHandsThePromiseOver: the worker shuts down while a committed
// turn's final event cannot be stored. It hands the lane over with its
// trigger un-acked and the turn's message kept, and the next worker
// publishes the final event (AckWait is ten minutes: only the hand-over can
// wake the lane within the test).
func TestShuttingDownWorkerHandsThePromiseOver(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Minute, 5*time.Second)
	failed := f.warnedAbout("final")
	started, release := make(chan struct{}), make(chan struct{})
	stop := f.startWorker(t, blockingHandler(started, release), Config{})
	seq := f.publish(t, "handover", "hold")
	<-started
	restore := f.eventsOffline(t)
	close(release)
	f.waitRecord(t, "handover", seq)
	t.Logf("committed while the event stream is away: %s", <-failed)
	stop()
	restore()
	f.startWorker(t, &echoHandler{}, Config{})
	if ev := f.waitFinal(t, "handover", seq); ev.Data.Result.Payloads[0].Text != "ok hold" {
		t.Fatalf("final = %+v", ev.Data.Result)
	}
	if n := f.finals(t, "handover", seq); n != 1 {
		t.Fatalf("%d final events stored", n)
	}
}

// TestSweepKeepsAnIdleLanesPromise: a lane whose newest turn is committed
// without its final event, with only that processed message left and no
// delivery to wake it (its owner died after handing nothing over): the
// sweep takes it over and the final event is published.
func TestSweepKeepsAnIdleLanesPromise(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Minute, 5*time.Second)
	ctx := t.Context()
	seq := f.publish(t, "idle", "answered")
	msgs, err := f.streams.Dispatch.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The record as the dead owner committed it.
	final, _, err := events.EncodeEvent(&events.Event{Stream: events.StreamFinal,
		Data: events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "ok answered"}}}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := events.KeyToken("idle")
	lease, err := f.lanes.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.PutRecord(ctx, kvstore.Record{InboundSeq: seq, RunID: fmt.Sprint(seq), Final: final}); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	f.startWorker(t, &echoHandler{}, Config{SweepEvery: 100 * time.Millisecond})
	if ev := f.waitFinal(t, "idle", seq); ev.Data.Result.Payloads[0].Text != "ok answered" {
		t.Fatalf("final = %+v", ev.Data.Result)
	}
}

// TestBusyWorkerHandsDeliveriesOn: a worker whose every slot is busy does
// not sit on another lane's delivery until AckWait (ten minutes here): it
// hands it back, and a worker with room runs that lane at once.
func TestBusyWorkerHandsDeliveriesOn(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Minute, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	busy := blockingHandler(started, release)
	f.startWorker(t, busy, Config{Concurrency: 1})
	f.publish(t, "slow", "hold")
	<-started
	seq := f.publish(t, "other", "waiting")
	f.startWorker(t, &echoHandler{}, Config{})
	if ev := f.waitFinal(t, "other", seq); ev.Data.Result.Payloads[0].Text != "ok waiting" {
		t.Fatalf("final = %+v", ev.Data.Result)
	}
}

// TestDeletingProcessedKeepsRedeliveries: a delivery handed back (Nak) must
// come back at once even when other lanes clean up meanwhile. A purge of the
// inbound stream, even of another lane's subject only, makes the server
// drop the dispatch consumer's redelivery queue, and the delivery would
// wait out AckWait (ten minutes here); owners and the sweep delete
// processed messages one by one instead.
func TestDeletingProcessedKeepsRedeliveries(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Minute, 5*time.Second)
	ctx := t.Context()
	handed := f.publish(t, "handed", "back")
	finished := f.publish(t, "finished", "done")
	leftover := f.publish(t, "leftover", "old")
	msgs, err := f.streams.Dispatch.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		md, _ := m.Metadata()
		if md.Sequence.Stream == handed {
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
		} else if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w, err := NewWorker(f.js, f.streams, f.lanes, &echoHandler{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	// An owner deletes the message of the turn it committed ...
	o := w.newOwner("finished", "", "agent.in.finished", ownerLease{}, 0)
	o.lane.processed = []uint64{finished}
	o.deleteProcessed(ctx, false)
	// ... and the sweep the processed leftovers of an idle lane.
	w.deleteLeftovers(ctx, "agent.in.leftover", leftover)
	for _, seq := range []uint64{finished, leftover} {
		if _, err := f.streams.Inbound.GetMsg(ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("processed message %d not deleted: %v", seq, err)
		}
	}
	again, err := f.streams.Dispatch.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range again.Messages() {
		if md, _ := m.Metadata(); md.Sequence.Stream == handed {
			n++
		}
	}
	if n != 1 {
		t.Fatal("the delivery handed back did not come back")
	}
}
