package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/schedstore"
	"github.com/lanefleet/lanefleet/schedule"
)

// The schedule measurements, each reported on its own line
// ("schedule scenario", "catch-up"): they run only with
// LANEFLEET_SCHED_SCENARIO set (make chaos-schedule), since they take
// a minute or two of wall-clock time by design.

// scenarioOn skips a scenario unless LANEFLEET_SCHED_SCENARIO is set.
func scenarioOn(t *testing.T) {
	t.Helper()
	if os.Getenv("LANEFLEET_SCHED_SCENARIO") == "" {
		t.Skip("set LANEFLEET_SCHED_SCENARIO=1 (make chaos-schedule)")
	}
}

// TestScheduleFaultScenario: an @every 2s schedule (overlap allow) on a
// 3-node cluster with three workers (R3) for 60 s, across a worker
// SIGKILL (at 10 s, back 2 s later), a worker SIGTERM restart (at 25 s)
// and a SIGKILL of the schedules stream's leader (at 40 s, back 3 s
// later): every due time recorded once and none fired twice (the soak's
// schedule audit), every fired run ended exactly once (the run audit),
// and lateness p99 at most 1 s outside the fault windows (reported for
// inside them).
func TestScheduleFaultScenario(t *testing.T) {
	scenarioOn(t)
	cl := natstest.StartProcCluster(t, 3)
	var workers []*procWorker
	for i := range 3 {
		workers = append(workers, startWorkerProc(t, cl.URL(), fmt.Sprintf("sched%d", i), "--replicas", "3", "--scripted-delay", "10ms"))
	}
	nc, js := connectProcs(t, cl)
	waitForFleet(t, js)
	fin := watchRunFinals(t, cl.URL())
	c, err := lanefleet.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sched := startChaosSchedule(t, c, js)
	start := time.Now()
	at := func(d time.Duration) { <-time.After(time.Until(start.Add(d))) } // the scenario's timeline
	var windows []faultWindow
	at(10 * time.Second)
	struck := time.Now()
	workers[0].kill()
	<-time.After(2 * time.Second)
	workers[0].start()
	windows = append(windows, faultWindow{struck, time.Now()})
	t.Logf("%5.1fs worker SIGKILL %s, back after 2s", struck.Sub(start).Seconds(), workers[0].id)

	at(25 * time.Second)
	struck = time.Now()
	workers[1].signal(syscall.SIGTERM)
	workers[1].wait()
	workers[1].start()
	windows = append(windows, faultWindow{struck, time.Now()})
	t.Logf("%5.1fs worker SIGTERM restart %s", struck.Sub(start).Seconds(), workers[1].id)

	at(40 * time.Second)
	struck = time.Now()
	nd, err := cl.StreamLeader(t.Context(), js, schedstore.Stream)
	if err != nil {
		t.Fatal(err)
	}
	nd.Kill()
	<-time.After(3 * time.Second)
	nd.Start()
	cl.WaitReady(t)
	windows = append(windows, faultWindow{struck, time.Now()})
	t.Logf("%5.1fs nats-server SIGKILL (%s leader) %s, back after 3s", struck.Sub(start).Seconds(), schedstore.Stream, nd.Name)

	at(60 * time.Second)
	runs, a := sched.finish(t, js, windows)
	fin.waitAll(t, js, runs, 5*time.Minute)
	counts := auditAll(t, js, runs)
	t.Logf("schedule scenario: 60s, 3 faults; %v; runs %v", a, counts)
	if p99 := pct(a.lateOut, 99); p99 > time.Second {
		a.problems = append(a.problems, fmt.Sprintf("lateness p99 outside the fault windows %v, over 1 s", p99))
	}
	if a.bad() || counts.bad() {
		for _, p := range a.problems[:min(len(a.problems), 5)] {
			t.Error("schedule: " + p)
		}
		t.Fatalf("the scenario found defects: %s", strings.Join(counts.examples, "; "))
	}
}

// catchUpEvery is the period of the catch-up scenario's schedules: the
// 30 s outage spans five due times.
const catchUpEvery = 6 * time.Second

// TestScheduleCatchUpScenario: three @every 6s schedules, catch-up all,
// one and none, each into its own session; the whole fleet (both workers)
// stopped for 30 s across five due times, then started. Each policy does
// what it says: all fires each of the five, oldest first; one and none
// fire the latest, which is on time (it passed less than a minute ago),
// and record the four before it missed; no due time is recorded twice,
// and each session ran exactly its fired turns.
func TestScheduleCatchUpScenario(t *testing.T) {
	scenarioOn(t)
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	// AddSchedule needs the schedules' bucket and stream, which the
	// workers make at start: wait for their creation.
	created := map[string]*nats.Subscription{}
	for _, name := range []string{"KV_" + schedstore.DefaultBucket, schedstore.Stream} {
		var err error
		if created[name], err = nc.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.CREATED." + name); err != nil {
			t.Fatal(err)
		}
	}
	w1 := startWorkerProc(t, srv.URL, "c1")
	w2 := startWorkerProc(t, srv.URL, "c2")
	waitForFleet(t, js)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for name, sub := range created {
		waitForStream(t, ctx, js, name, sub)
	}
	c, err := lanefleet.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	policies := []schedule.CatchUp{schedule.CatchUpAll, schedule.CatchUpOne, schedule.CatchUpNone}
	ids := map[schedule.CatchUp]string{}
	for _, p := range policies {
		sc, err := c.AddSchedule(t.Context(), lanefleet.NewSchedule{Session: "catchup:" + string(p), Every: catchUpEvery,
			Overlap: schedule.OverlapAllow, CatchUp: p, Message: events.Inbound{Text: "tick"}})
		if err != nil {
			t.Fatal(err)
		}
		ids[p] = sc.ID
	}
	kv, err := js.KeyValue(t.Context(), schedstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(t.Context(), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	// until waits for every schedule's history to satisfy ok.
	until := func(what string, ok func(s *schedule.Schedule) bool) map[schedule.CatchUp]*schedule.Schedule {
		t.Helper()
		deadline := time.After(2 * time.Minute)
		for {
			got := map[schedule.CatchUp]*schedule.Schedule{}
			for p, id := range ids {
				s, err := c.Schedule(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				if ok(s) {
					got[p] = s
				}
			}
			if len(got) == len(ids) {
				return got
			}
			select {
			case <-w.Updates():
			case <-deadline:
				t.Fatalf("waiting for %s", what)
			}
		}
	}
	until("a first firing", func(s *schedule.Schedule) bool { return len(s.History) > 0 })
	w1.signal(syscall.SIGTERM)
	w2.signal(syscall.SIGTERM)
	w1.wait()
	w2.wait()
	down := time.Now()
	<-time.After(time.Until(down.Add(30 * time.Second))) // the outage itself
	up := time.Now()
	w1.start()
	w2.start()
	t.Logf("the fleet was down %v", up.Sub(down).Round(time.Millisecond))
	// Every due time of the outage handled: the history reaches the
	// latest one before the restart.
	last := up.UnixMilli()
	got := until("the outage's due times", func(s *schedule.Schedule) bool {
		n := len(s.History)
		return n > 0 && s.History[n-1].DueMs > last-catchUpEvery.Milliseconds()
	})
	for _, id := range ids {
		if _, err := c.PauseSchedule(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	waitDrained(t, js, time.Minute)
	var report []string
	for _, p := range policies {
		s := got[p]
		fired, missed, seen := 0, 0, map[int64]bool{}
		var firedDues []int64
		for _, f := range s.History {
			if seen[f.DueMs] {
				t.Errorf("%s: due %d recorded twice", p, f.DueMs)
			}
			seen[f.DueMs] = true
			if f.DueMs <= down.UnixMilli() {
				continue // before the outage
			}
			switch f.Outcome {
			case schedule.Fired:
				fired++
				firedDues = append(firedDues, f.DueMs)
			case schedule.Missed:
				missed += max(f.Count, 1)
			default:
				t.Errorf("%s: due %d %s", p, f.DueMs, f.Outcome)
			}
		}
		report = append(report, fmt.Sprintf("%s: %d fired, %d missed", p, fired, missed))
		dues := fired + missed
		switch p {
		case schedule.CatchUpAll:
			if fired != dues || dues < 4 {
				t.Errorf("catch-up all fired %d of the outage's %d due times", fired, dues)
			}
		default:
			if fired != 1 || missed != dues-1 || dues < 4 || firedDues[0] != s.History[len(s.History)-1].DueMs {
				t.Errorf("catch-up %s: %d fired (%v), %d missed of %d due times; want the latest fired, the rest missed", p, fired, firedDues, missed, dues)
			}
		}
		total := 0
		for _, f := range s.History {
			if f.Outcome == schedule.Fired {
				total++
			}
		}
		if texts := userTexts(t, c, "catchup:"+string(p)); len(texts) != total {
			t.Errorf("catch-up %s: the session ran %d turns; the schedule fired %d times", p, len(texts), total)
		}
	}
	t.Logf("catch-up, the whole fleet stopped %v across the due times of an @every %v schedule: %s",
		up.Sub(down).Round(time.Second), catchUpEvery, strings.Join(report, "; "))
}
