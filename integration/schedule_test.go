package integration

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/schedstore"
	"github.com/lanefleet/lanefleet/schedule"
)

// TestScheduleAcrossWorkerFaults: an @every 1s schedule on two worker
// processes, across a SIGKILL of one, and the whole fleet stopped (one
// by SIGTERM, one by SIGKILL) over several due times and started again:
// every due time from the first to the last is recorded exactly once
// (fired, or missed and caught up once as the default catch-up policy
// says), every fired one ran exactly once as its own run, and nothing
// else reached the session.
func TestScheduleAcrossWorkerFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("worker processes")
	}
	t.Parallel()
	start := time.Now()
	mark := func(what string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), what) }
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	w1 := startWorkerProc(t, srv.URL, "s1")
	w2 := startWorkerProc(t, srv.URL, "s2")
	waitForFleet(t, js)
	c, err := lanefleet.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var sc *schedule.Schedule
	for deadline := time.Now().Add(time.Minute); ; {
		sc, err = c.AddSchedule(callCtx(t), lanefleet.NewSchedule{Session: "sched", Every: time.Second, Overlap: schedule.OverlapAllow,
			Message: events.Inbound{Text: "tick"}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the workers make the bucket at start
	}
	// Each firing's record write is a KV update: wait on them.
	kv, err := js.KeyValue(t.Context(), schedstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := kv.Watch(t.Context(), sc.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Stop() }()
	latest := func() *schedule.Schedule {
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
		s, err := c.Schedule(ctx, sc.ID)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitFired := func(n int) *schedule.Schedule {
		t.Helper()
		deadline := time.After(2 * time.Minute) // detects a hang only: a firing a second comes in any case
		for {
			s := latest()
			got := 0
			for _, f := range s.History {
				if f.Outcome == schedule.Fired {
					got++
				}
			}
			if got >= n {
				return s
			}
			select {
			case <-watch.Updates():
			case <-deadline:
				t.Fatalf("waiting for %d firings: history %+v", n, s.History)
			}
		}
	}
	mark("added")
	waitFired(2)
	mark("2 fired")
	w1.kill()
	waitFired(4)
	mark("4 fired")
	// The whole fleet down over at least three due times.
	w2.signal(syscall.SIGTERM)
	w2.wait()
	down := time.Now()
	<-time.After(time.Until(down.Add(3500 * time.Millisecond))) // a deterministic span of due times, not a guess
	mark("down")
	up := time.Now()
	w1.start()
	w2.start()
	// Caught up once a firing due after the restart is recorded: the
	// history is in due-time order, so the outage's due times (missed,
	// and one caught up) are in it by then. Not a count of entries: the
	// history keeps only the newest 50, and a slow run reaches that.
	caughtUp := func(s *schedule.Schedule) bool {
		for _, f := range s.History {
			if f.Outcome == schedule.Fired && f.DueMs >= up.UnixMilli() {
				return true
			}
		}
		return false
	}
	deadline := time.After(2 * time.Minute) // detects a hang only: a firing a second comes in any case
	s := latest()
	for !caughtUp(s) {
		select {
		case <-watch.Updates():
		case <-deadline:
			t.Fatalf("after the restart: history %+v", s.History)
		}
		s = latest()
	}
	mark("caught up")
	// Every due time once, one second apart, from the first to the last.
	var dues []int64
	var runs []string
	missed := 0
	for _, f := range s.History {
		switch f.Outcome {
		case schedule.Fired:
			dues = append(dues, f.DueMs)
			runs = append(runs, f.RunID)
		case schedule.Missed:
			missed += f.Count
			dues = append(dues, f.DueMs) // Count 1 each here
		default:
			t.Errorf("firing %+v", f)
		}
	}
	for i := 1; i < len(dues); i++ {
		if dues[i]-dues[i-1] != 1000 {
			t.Fatalf("due times %v: a gap or a repeat at %d", dues, i)
		}
	}
	if missed < 2 {
		t.Errorf("the outage over 3 s missed %d due times: %+v", missed, s.History)
	}
	sorted := slices.Clone(runs)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != len(runs) {
		t.Fatalf("a run id recorded twice: %v", runs)
	}
	// Stop the schedule, let the lanes finish, and count the session's turns.
	if _, err := c.PauseSchedule(callCtx(t), sc.ID); err != nil {
		t.Fatal(err)
	}
	s = latest()
	fired := 0
	for _, f := range s.History {
		if f.Outcome == schedule.Fired {
			fired++
		}
	}
	waitDrained(t, js, 2*time.Minute)
	mark("drained")
	for _, r := range runs {
		checkRun(t, js, "sched", r)
	}
	if texts := userTexts(t, c, "sched"); len(texts) != fired {
		t.Fatalf("the session ran %d turns; the schedule fired %d times: %+v", len(texts), fired, s.History)
	}
}
