package schedstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	neturl "net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/schedule"
)

// clock is real time shifted by a settable offset: the server's timers
// run on real time while a test moves the workers' clock past due times
// (an outage) without waiting for them.
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

type bundle struct {
	url   string
	js    jetstream.JetStream
	clock *clock
	store *Store
}

func setup(t *testing.T) bundle {
	t.Helper()
	srv := natstest.Start(t)
	return open(t, srv.URL)
}

func open(t *testing.T, url string) bundle {
	t.Helper()
	js := natstest.JetStream(t, url)
	if _, err := lanes.EnsureStreams(t.Context(), js, lanes.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	c := &clock{}
	st, err := Open(t.Context(), js, Config{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{url: url, js: js, clock: c, store: st}
}

// firer starts a Firer on a connection of its own (a worker), stopped
// when the test ends or stop is called.
func (b bundle) firer(t *testing.T) (f *Firer, stop func()) {
	t.Helper()
	js := natstest.JetStream(t, b.url)
	st, err := Open(t.Context(), js, Config{Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	f, err = NewFirer(t.Context(), FirerConfig{Store: st, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return f, stop
}

func every(d time.Duration, text string) *schedule.Schedule {
	return &schedule.Schedule{Session: "alice", Spec: schedule.Spec{EveryMs: d.Milliseconds()},
		Overlap: schedule.OverlapAllow, CatchUp: schedule.CatchUpOne, Message: events.Inbound{Text: text}}
}

// waitHistory waits until the schedule's history satisfies cond.
func (b bundle) waitHistory(t *testing.T, id string, what string, cond func([]schedule.Firing) bool) *schedule.Schedule {
	t.Helper()
	// The history is a KV record: watch it (its current value first, so
	// no write between a read and a watch is missed).
	w, err := b.store.kv.Watch(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	deadline := time.After(time.Minute)
	var last *schedule.Schedule
	for {
		select {
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			sc, err := schedule.Decode(e.Value())
			if err != nil {
				t.Fatal(err)
			}
			// A settled record: a plan whose firings are not sent yet
			// notes them once they are.
			if last = sc; len(sc.Pending) == 0 && cond(sc.History) {
				return sc
			}
		case <-deadline:
			if last == nil {
				t.Fatalf("waiting for %s: no record", what)
			}
			t.Fatalf("waiting for %s: history %+v, pending %v", what, last.History, last.Pending)
		}
	}
}

// inbound returns the lane message ids stored for the session, in order.
func (b bundle) inbound(t *testing.T, session string) []string {
	t.Helper()
	s, err := b.js.Stream(t.Context(), events.InboundStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == events.InboundPrefix+session {
			ids = append(ids, m.Header.Get(events.HeaderLaneMsgID))
		}
	}
	return ids
}

// hourlyDue adds an hourly schedule to a fresh server, with a Firer that
// is not running, and moves the clock just past its first due time, which
// it returns.
func hourlyDue(t *testing.T) (bundle, *Firer, *schedule.Schedule, time.Time) {
	t.Helper()
	b := setup(t)
	f, err := NewFirer(t.Context(), FirerConfig{Store: b.store})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := b.store.Add(t.Context(), every(time.Hour, "hourly"))
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour + time.Second)
	return b, f, sc, time.UnixMilli(sc.Spec.AnchorMs).Add(time.Hour)
}

func fired(h []schedule.Firing) []schedule.Firing {
	return slices.DeleteFunc(slices.Clone(h), func(f schedule.Firing) bool { return f.Outcome != schedule.Fired })
}

// TestFiresOnTimeOnceWithTwoWorkers: an @every 1s schedule with two
// workers consuming firings fires each due time once, each firing one
// message on the lane, its run id recorded, late by well under a second.
func TestFiresOnTimeOnceWithTwoWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f1, _ := b.firer(t)
	f2, _ := b.firer(t)
	sc, err := b.store.Add(t.Context(), every(time.Second, "tick"))
	if err != nil {
		t.Fatal(err)
	}
	got := b.waitHistory(t, sc.ID, "3 firings", func(h []schedule.Firing) bool { return len(fired(h)) >= 3 })
	ids := b.inbound(t, "alice")
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("lane message id %s stored twice: %v", id, ids)
		}
		seen[id] = true
	}
	for _, fi := range fired(got.History) {
		if !seen[sc.LaneMsgID(time.UnixMilli(fi.DueMs))] || fi.RunID == "" || fi.Session != "alice" {
			t.Errorf("firing %+v: no message on the lane (%v)", fi, ids)
		}
		if late := time.Duration(fi.HandledMs-fi.DueMs) * time.Millisecond; late < 0 || late > 2*time.Second {
			t.Errorf("firing %+v handled %v after its due time", fi, late)
		}
	}
	if n := f1.Stats.Fired.Load() + f2.Stats.Fired.Load(); n < 3 {
		t.Errorf("the firers count %d firings", n)
	}
}

// TestHandleTwiceFiresOnce: two workers handling the same due time at
// once (a redelivery after a stall) send one message: the second send is
// a duplicate, and one record write wins.
func TestHandleTwiceFiresOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f1, err := NewFirer(t.Context(), FirerConfig{Store: b.store})
	if err != nil {
		t.Fatal(err)
	}
	b2 := open(t, b.url)
	b2.clock = b.clock
	st2, err := Open(t.Context(), b2.js, Config{Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	f2, err := NewFirer(t.Context(), FirerConfig{Store: st2})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := b.store.Add(t.Context(), every(time.Hour, "hourly"))
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour + time.Second)
	for range 3 { // the same due time, handled again and again
		var wg sync.WaitGroup
		for _, f := range []*Firer{f1, f2} {
			wg.Go(func() {
				if err := f.Handle(t.Context(), sc.ID); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	got, _, err := b.store.Get(t.Context(), sc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ids := b.inbound(t, "alice"); len(ids) != 1 || len(got.History) != 1 || got.History[0].Outcome != schedule.Fired {
		t.Fatalf("lane holds %v; history %+v", ids, got.History)
	}
}

// TestRecordLostAfterSendFiresOnce: a worker that sent a firing and died
// before recording it leaves the next handler to send it again: the
// stream keeps one copy and the run id is the first send's.
func TestRecordLostAfterSendFiresOnce(t *testing.T) {
	t.Parallel()
	b, f, sc, due := hourlyDue(t)
	first, err := f.send(t.Context(), sc, "alice", due, b.clock.Now()) // then "died"
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Handle(t.Context(), sc.ID); err != nil {
		t.Fatal(err)
	}
	got, _, _ := b.store.Get(t.Context(), sc.ID)
	if ids := b.inbound(t, "alice"); len(ids) != 1 || len(got.History) != 1 || got.History[0].RunID != first {
		t.Fatalf("lane holds %v; history %+v; first send's run %s", ids, got.History, first)
	}
}

// TestCatchUp: the workers down across five due times of an @every 2s
// schedule (a clock moved 11 s ahead while the server timer was pending):
// each policy does what it says, and no due time goes unrecorded.
func TestCatchUp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy        schedule.CatchUp
		fired, missed int
	}{
		{schedule.CatchUpAll, 5, 0},
		{schedule.CatchUpOne, 1, 4},
		{schedule.CatchUpNone, 1, 4}, // the on-time one only
	} {
		t.Run(string(c.policy), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s := every(2*time.Second, "catch up")
			s.CatchUp = c.policy
			sc, err := b.store.Add(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(9 * time.Second) // the first due time (real, ≤ 3 s away) reads as the fifth
			b.firer(t)
			got := b.waitHistory(t, sc.ID, "the catch-up", func(h []schedule.Firing) bool { return len(h) > 0 })
			var fired, missed int
			for _, fi := range got.History {
				switch fi.Outcome {
				case schedule.Fired:
					fired++
				case schedule.Missed:
					missed += fi.Count
				}
			}
			if fired != c.fired || missed != c.missed || len(b.inbound(t, "alice")) != c.fired {
				t.Fatalf("fired %d, missed %d, want %d and %d; history %+v", fired, missed, c.fired, c.missed, got.History)
			}
		})
	}
}

// TestOverlapSkip: while the previous firing's message waits, a firing
// is skipped; once it is processed, the next fires.
func TestOverlapSkip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f, err := NewFirer(t.Context(), FirerConfig{Store: b.store})
	if err != nil {
		t.Fatal(err)
	}
	s := every(time.Hour, "hourly")
	s.Overlap = schedule.OverlapSkip
	sc, err := b.store.Add(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	step := func() []schedule.Firing {
		b.clock.Advance(time.Hour)
		if err := f.Handle(t.Context(), sc.ID); err != nil {
			t.Fatal(err)
		}
		got, _, _ := b.store.Get(t.Context(), sc.ID)
		return got.History
	}
	b.clock.Advance(time.Second)
	step()
	h := step()
	if len(h) != 2 || h[0].Outcome != schedule.Fired || h[1].Outcome != schedule.Skipped {
		t.Fatalf("history %+v", h)
	}
	// The lane processes the first firing's message.
	in, _ := b.js.Stream(t.Context(), events.InboundStream)
	seq := mustSeq(t, h[0].RunID)
	if err := in.DeleteMsg(t.Context(), seq); err != nil {
		t.Fatal(err)
	}
	if h = step(); h[2].Outcome != schedule.Fired {
		t.Fatalf("history %+v", h)
	}
}

func mustSeq(t *testing.T, run string) uint64 {
	t.Helper()
	var seq uint64
	if _, err := fmt.Sscan(run, &seq); err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestPauseResumeRemove: a paused schedule fires nothing; resumed, it
// counts from then; removed, it is gone with its timer.
func TestPauseResumeRemove(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f, err := NewFirer(t.Context(), FirerConfig{Store: b.store})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := b.store.Add(t.Context(), every(time.Hour, "hourly"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.SetPaused(t.Context(), sc.ID, true); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(3 * time.Hour)
	if err := f.Handle(t.Context(), sc.ID); err != nil {
		t.Fatal(err)
	}
	resumed := b.clock.Now()
	got, err := b.store.SetPaused(t.Context(), sc.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.History) != 0 || len(b.inbound(t, "alice")) != 0 {
		t.Fatalf("paused, it fired: %+v", got.History)
	}
	if next := time.UnixMilli(got.NextMs); !next.After(resumed) || got.LastDueMs < resumed.UnixMilli() {
		t.Fatalf("resumed at %v with next %v, last handled %v: the paused hours are caught up", resumed, next, time.UnixMilli(got.LastDueMs))
	}
	if err := b.store.Remove(t.Context(), sc.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.Get(t.Context(), sc.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removed, Get says %v", err)
	}
	armed, err := b.store.armed(t.Context())
	if err != nil || armed[sc.ID] {
		t.Fatalf("removed, its timer is pending (%v)", err)
	}
}

// TestHostileRecord: a record that does not decode is refused with a
// clear error, and listing goes on past it.
func TestHostileRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.store.kv.Put(t.Context(), "evil", []byte(`{"id":"evil","spec":{"cron":"* * *"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Add(t.Context(), every(time.Hour, "ok")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.Get(t.Context(), "evil"); !errors.Is(err, schedule.ErrBadRecord) {
		t.Fatalf("Get: %v", err)
	}
	all, bad, err := b.store.List(t.Context())
	if err != nil || len(all) != 1 || len(bad) != 1 {
		t.Fatalf("List: %d good, %v bad, %v", len(all), bad, err)
	}
	f, _ := NewFirer(t.Context(), FirerConfig{Store: b.store})
	if err := f.Handle(t.Context(), "evil"); !errors.Is(err, schedule.ErrBadRecord) {
		t.Fatalf("Handle: %v", err)
	}
}

// TestTimerSurvivesServerRestart: the server's pending timer is stored
// in the stream: a server restarted before the due time still fires it,
// and a worker fires it once.
func TestTimerSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	off := false
	start := func(port int) *server.Server {
		s, err := embedded.Start(embedded.Config{Name: "restart", DataDir: dir, Port: port, SyncAlways: &off})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	srv := start(0)
	url := srv.ClientURL()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	b := open(t, url)
	sc, err := b.store.Add(t.Context(), every(2*time.Second, "after restart"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	srv = start(port)
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	b.firer(t)
	b.waitHistory(t, sc.ID, "a firing after the restart", func(h []schedule.Firing) bool { return len(fired(h)) >= 1 })
}

// planOnly stores what a handler's plan for the schedule's first due
// time writes before it sends (the firing pending), as a handler that
// then died or lost its next record write leaves it.
func planOnly(t *testing.T, b bundle, id string, due time.Time) *schedule.Schedule {
	t.Helper()
	sc, rev, err := b.store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	now := b.clock.Now()
	sc.Pending, sc.PlannedMs = []int64{due.UnixMilli()}, now.UnixMilli()
	sc.LastDueMs, sc.NextMs = due.UnixMilli(), due.Add(time.Hour).UnixMilli()
	data, err := sc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.kv.Update(t.Context(), id, data, rev); err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestSentFiringNotPlannedAgain: a handler planned a firing, sent it and
// lost the record write that says so (a timeout at a stream leader's
// death); the retry comes after the next due time. The sent firing is
// recorded as fired with its first run, once on the lane, and the next
// due time is planned on its own. Before plans were stored ahead of their
// sends, the retry planned both due times again: the sent one recorded
// as missed, its turn run all the same (the fault soak's schedule: 27
// turns, 26 fired).
func TestSentFiringNotPlannedAgain(t *testing.T) {
	t.Parallel()
	b, f, sc, due := hourlyDue(t)
	sc = planOnly(t, b, sc.ID, due)
	first, err := f.send(t.Context(), sc, "alice", due, time.UnixMilli(sc.PlannedMs)) // sent; the record write lost
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour + 2*schedule.OnTimeGrace) // the retry, past the next due time's grace
	if err := f.Handle(t.Context(), sc.ID); err != nil {
		t.Fatal(err)
	}
	got, _, _ := b.store.Get(t.Context(), sc.ID)
	if ids := b.inbound(t, "alice"); len(ids) != 2 {
		t.Fatalf("lane holds %v; history %+v", ids, got.History)
	}
	if len(got.History) != 2 || got.History[0].Outcome != schedule.Fired || got.History[0].RunID != first ||
		got.History[1].Outcome != schedule.Fired || got.History[1].DueMs != due.Add(time.Hour).UnixMilli() || len(got.Pending) != 0 {
		t.Fatalf("history %+v, pending %v; the first send's run %s", got.History, got.Pending, first)
	}
}

// TestPlannedFiringSentAfterPause: a plan stored by a handler that died
// before sending is carried out by the next handler, though the schedule
// was paused meanwhile: the plan was made while it ran, and its due time
// is recorded as fired with its run, never left without one.
func TestPlannedFiringSentAfterPause(t *testing.T) {
	t.Parallel()
	b, f, sc, due := hourlyDue(t)
	planOnly(t, b, sc.ID, due)
	if _, err := b.store.SetPaused(t.Context(), sc.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := f.Handle(t.Context(), sc.ID); err != nil {
		t.Fatal(err)
	}
	got, _, _ := b.store.Get(t.Context(), sc.ID)
	ids := b.inbound(t, "alice")
	if len(ids) != 1 || len(got.History) != 1 || got.History[0].RunID == "" || len(got.Pending) != 0 || !got.Paused {
		t.Fatalf("lane %v; history %+v, pending %v, paused %v", ids, got.History, got.Pending, got.Paused)
	}
}

// TestAddLeavesRoomForHistory: a schedule whose record fits only without
// its history is refused at Add (else its first firing is sent, then its
// record write refused: unrecorded, the schedule never re-armed).
func TestAddLeavesRoomForHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := every(time.Hour, "hourly")
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, (schedule.MaxRecordBytes-schedule.HistoryLen*1024)*3/4)...)
	big.Message.Images = []events.Image{{MimeType: "image/png", Data: base64.StdEncoding.EncodeToString(png)}}
	if _, err := b.store.Add(t.Context(), big); !errors.Is(err, schedule.ErrBadRecord) {
		t.Fatalf("a record with no room for its history: %v, want ErrBadRecord", err)
	}
}

// TestDeadHoldersFiringComesBack: a worker that took a firing message and
// died without settling it (SIGKILL) holds it only until ackWait, not the
// 30 s it used to: the worker that was running all along fires the due
// time then (no start-up re-arming covers it).
func TestDeadHoldersFiringComesBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, stop := b.firer(t) // makes the consumer
	js := natstest.JetStream(t, b.url)
	nc := js.Conn()
	var cons jetstream.Consumer
	var err error
	for cons == nil {
		if cons, err = js.Consumer(t.Context(), Stream, ConsumerName); errors.Is(err, jetstream.ErrConsumerNotFound) {
			time.Sleep(10 * time.Millisecond) // the firer makes it after re-arming
		} else if err != nil {
			t.Fatal(err)
		}
	}
	stop()
	// The dead worker's pull request waits first in the server's queue,
	// the live worker's after it: the first firing goes to the dead one.
	taken := make(chan jetstream.Msg, 1)
	go func() {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Minute))
		if err != nil {
			t.Error(err)
			taken <- nil
			return
		}
		var got jetstream.Msg
		for m := range batch.Messages() {
			got = m
		}
		taken <- got
	}()
	waiting := func(n int) {
		t.Helper()
		for {
			info, err := cons.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if info.NumWaiting >= n {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waiting(1)
	b.firer(t)
	waiting(2)
	sc, err := b.store.Add(t.Context(), every(time.Second, "tick"))
	if err != nil {
		t.Fatal(err)
	}
	m := <-taken
	if m == nil {
		t.Fatal("the dead worker took no firing")
	}
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	nc.Close() // dies without settling it
	got := b.waitHistory(t, sc.ID, "the taken firing", func(h []schedule.Firing) bool { return len(h) > 0 })
	if late := time.Since(md.Timestamp); late >= 30*time.Second {
		t.Fatalf("the dead worker's firing came back %v after it was taken (history %+v)", late, got.History)
	}
}

// blockingRuns is a RunLookup whose first lookup blocks until release is
// closed.
type blockingRuns struct {
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (r *blockingRuns) Get(ctx context.Context, _ string) (kvstore.RunInfo, bool, error) {
	if r.calls.Add(1) == 1 {
		close(r.entered)
		select {
		case <-r.release:
		case <-ctx.Done():
		}
	}
	return kvstore.RunInfo{}, false, nil
}

// TestSlowHandlerKeepsItsFiring: a handler busy for longer than ackWait
// (a slow server) renews its firing, so no other worker handles the same
// firing meanwhile.
func TestSlowHandlerKeepsItsFiring(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Two workers share one lookup: the first call blocks, and any other
	// (a redelivered firing) is counted.
	runs := &blockingRuns{entered: make(chan struct{}), release: make(chan struct{})}
	for range 2 {
		js := natstest.JetStream(t, b.url)
		st, err := Open(t.Context(), js, Config{Now: b.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		f, err := NewFirer(t.Context(), FirerConfig{Store: st, Runs: runs, Log: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	sc, err := b.store.Add(t.Context(), every(time.Second, "tick"))
	if err != nil {
		t.Fatal(err)
	}
	// The second firing looks its predecessor up (its message waits on
	// the lane: no worker runs turns here), and blocks.
	select {
	case <-runs.entered:
	case <-t.Context().Done():
		t.Fatal("no lookup")
	}
	<-time.After(2*ackWait + ackWait/2) // past the server's redelivery, were the firing not renewed
	cons, err := b.js.Consumer(t.Context(), Stream, ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	calls := runs.calls.Load()
	close(runs.release)
	if info.NumRedelivered != 0 || calls != 1 {
		t.Fatalf("the busy handler's firing was redelivered %d times; %d lookups", info.NumRedelivered, calls)
	}
	b.waitHistory(t, sc.ID, "two firings", func(h []schedule.Firing) bool { return len(fired(h)) >= 2 })
}

// TestRunStoppedWhileStarting: a Firer stopped while it starts returns nil,
// as one stopped later does. It returned the consumer request's "context
// canceled": under -race on a loaded machine TestDeadHoldersFiringComesBack
// stopped its first firer once the consumer existed on the server, before
// the firer had the server's answer, and failed on that error.
func TestRunStoppedWhileStarting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f, err := NewFirer(t.Context(), FirerConfig{Store: b.store, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := f.Run(ctx); err != nil {
		t.Fatalf("Run stopped while starting: %v", err)
	}
}
