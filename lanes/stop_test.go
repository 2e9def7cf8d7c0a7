package lanes

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
)

// untilCut runs every turn whose text is "long" until its context ends, as
// a model call that would take minutes; started is told its run id. Other
// turns echo.
func untilCut(started chan<- string, echo *echoHandler) Handler {
	return HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		if turn.Inbound.Text == "long" {
			if started != nil {
				started <- turn.RunID
			}
			<-ctx.Done()
			return nil, context.Cause(ctx)
		}
		return echo.HandleTurn(ctx, turn)
	})
}

// TestStopEndsTheRunningTurn: a stop command cuts the running turn at once
// (its run ends interrupted, saying it was stopped), drops what was queued
// before it (settings among them are applied), runs no prompt, and its own
// run says what it stopped; a message sent after it runs as usual.
func TestStopEndsTheRunningTurn(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started := make(chan string, 1)
	echo := &echoHandler{}
	f.startWorker(t, untilCut(started, echo), Config{})
	long := f.publish(t, "s", "long")
	<-started
	q1 := f.publish(t, "s", "queued one")
	set := f.setQueue(t, "s", events.QueueSettings{Mode: "collect"})
	q2 := f.publish(t, "s", "queued two")
	stop := f.publishIn(t, "s", &events.Inbound{Stop: true})
	after := f.publishMode(t, "s", "after", "followup")

	ev := f.waitFinal(t, "s", long)
	if e := ev.Data.Result.Meta.Error; e == nil || e.Kind != events.KindInterrupted || !ev.Data.Result.Meta.Aborted || !strings.HasPrefix(e.Message, "stopped:") {
		t.Fatalf("stopped run final = %+v", ev.Data.Result.Meta)
	}
	for _, q := range []uint64{q1, q2} {
		if e := f.waitFinal(t, "s", q).Data.Result.Meta.Error; e == nil || e.Kind != events.KindInterrupted || !strings.Contains(e.Message, "stop command") {
			t.Fatalf("queued run %d final error = %+v, want dropped by the stop", q, e)
		}
	}
	if ev := f.waitFinal(t, "s", set); ev.Data.Result.Payloads[0].Text != "queue settings: mode collect" {
		t.Fatalf("settings queued before the stop = %+v", ev.Data.Result)
	}
	want := fmt.Sprintf("stopped run %d; dropped 2 queued message(s)", long)
	if ev := f.waitFinal(t, "s", stop); ev.Data.Result.Payloads[0].Text != want || ev.Data.Result.Meta.Error != nil {
		t.Fatalf("stop run final = %+v, want %q", ev.Data.Result, want)
	}
	if ev := f.waitFinal(t, "s", after); ev.Data.Result.Payloads[0].Text != "ok after" {
		t.Fatalf("message after the stop = %+v", ev.Data.Result)
	}
	echo.mu.Lock()
	defer echo.mu.Unlock()
	if got := echo.seen["s"]; len(got) != 1 || got[0] != "after" {
		t.Fatalf("turns run after the stop: %q, want only the message sent after it", got)
	}
	recs, _ := f.lanes.Records(t.Context(), "s")
	if len(recs) != 3 || len(recs[0].Entries) != 0 || len(recs[1].Entries) != 0 {
		t.Fatalf("records = %+v; want the stopped turn and the stop with no entries, then the message after", recs)
	}
}

// TestStopWithNothingRunning: a stop on an idle session ends its own run
// saying nothing was running.
func TestStopWithNothingRunning(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	echo := &echoHandler{}
	f.startWorker(t, echo, Config{})
	first := f.publish(t, "n", "hello")
	f.waitFinal(t, "n", first)
	stop := f.publishIn(t, "n", &events.Inbound{Stop: true})
	if ev := f.waitFinal(t, "n", stop); ev.Data.Result.Payloads[0].Text != "nothing was running" {
		t.Fatalf("idle stop = %+v", ev.Data.Result)
	}
}

// TestCutRightAfterStart: an interrupt or a stop published the moment a
// client sees the turn's start event cuts the turn. (The owner used to
// subscribe for cuts after publishing the start event, so such a cut was
// missed now and then and the turn ran on.)
func TestCutRightAfterStart(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	f.startWorker(t, untilCut(nil, &echoHandler{}), Config{})
	nc := f.js.Conn()
	for i := range 8 {
		key := fmt.Sprintf("race%d", i)
		tok, _ := events.KeyToken(key)
		cut := make(chan sentCut, 1)
		stopCmd := i%2 == 1
		// Only the first start (the long turn's) is cut: the interrupt's
		// own turn starts too, and a cut of it would chain more sends that
		// outlive the test (and fail it from a goroutine).
		var once sync.Once
		sub, err := nc.Subscribe(events.EventPrefix+tok+".*", func(m *nats.Msg) {
			ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
			if err != nil || ev.Stream != events.StreamLifecycle || ev.Data.Phase != events.PhaseStart || ev.Data.InboundSeq == 0 {
				return
			}
			in := &events.Inbound{Text: "stop it", Mode: "interrupt"}
			if stopCmd {
				in = &events.Inbound{Stop: true}
			}
			once.Do(func() {
				go func() {
					seq, err := f.sendInbound(t.Context(), key, in)
					cut <- sentCut{seq, err}
				}()
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		long := f.publish(t, key, "long")
		ev := f.waitFinal(t, key, long)
		_ = sub.Unsubscribe()
		if e := ev.Data.Result.Meta.Error; e == nil || e.Kind != events.KindInterrupted {
			t.Fatalf("%s: cut run final = %+v", key, ev.Data.Result.Meta)
		}
		c := <-cut
		if c.err != nil {
			t.Fatalf("%s: publish the cut: %v", key, c.err)
		}
		f.waitFinal(t, key, c.seq)
	}
}

// sentCut is what a cut published from a subscription's goroutine got.
type sentCut struct {
	seq uint64
	err error
}

// sendInbound publishes in to key's lane and returns its stream sequence;
// unlike publishIn it calls no t.Fatal, for goroutines other than the
// test's.
func (f *fleet) sendInbound(ctx context.Context, key string, in *events.Inbound) (uint64, error) {
	subj, err := events.InboundSubject(key)
	if err != nil {
		return 0, err
	}
	data, ct, err := events.EncodeInbound(in, false)
	if err != nil {
		return 0, err
	}
	m := nats.NewMsg(subj)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	ack, err := f.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("publish: %w", err)
	}
	return ack.Sequence, nil
}
