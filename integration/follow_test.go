package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// eventConsumers returns how many consumers AGENT_EV has: following runs
// must leave none.
func eventConsumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	info, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	return info.CachedInfo().State.Consumers
}

// TestThousandsOfWaits: 1,200 Send+Wait on one fleet (each Wait used to
// leave a consumer for 5 minutes, and the 1,001st failed) all succeed, and
// no consumer is left on AGENT_EV. 1,200 passes the old failure point; the
// 3,000 it once sent cost 85 s of a loaded suite and pinned nothing more
// (a single leaked consumer fails the count). Not parallel: its turns would
// slow the load tests that run beside it past their windows.
func TestThousandsOfWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "waited", Concurrency: 32, NoRemoteTools: true})
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	const sessions, each = 24, 50
	var (
		wg     sync.WaitGroup
		done   atomic.Int64
		failed = make(chan error, sessions)
	)
	start := time.Now()
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			session := fmt.Sprintf("waits:%d", s)
			for i := range each {
				text := fmt.Sprintf("m%d", i)
				run, err := c.Send(ctx, session, text)
				if err != nil {
					failed <- fmt.Errorf("%s send %d: %w", session, i, err)
					return
				}
				res, err := run.Wait(ctx)
				if err != nil {
					failed <- fmt.Errorf("%s wait %d (run %s): %w", session, i, run.ID, err)
					return
				}
				if got := res.Payloads[0].Text; got != "echo: "+text {
					failed <- fmt.Errorf("%s run %s: %q", session, run.ID, got)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	if n := done.Load(); n != sessions*each {
		t.Fatalf("%d of %d waits done", n, sessions*each)
	}
	if n := eventConsumers(t, js); n != 0 {
		t.Fatalf("%d consumers left on %s", n, events.EventStream)
	}
	t.Logf("%d Send+Wait in %v (%v each, %d sessions at once); no consumer on %s", done.Load(), time.Since(start).Round(time.Millisecond),
		(time.Since(start) / time.Duration(done.Load()) * sessions).Round(100*time.Microsecond), sessions, events.EventStream)
}

// TestFollowThroughAHandOver: a viewer following a run whose worker stops
// mid-run sees the first attempt aborted, the restart on the other worker
// and the final event, each event once with no gap in seq; a viewer that
// comes after the end replays the same events from the store.
func TestFollowThroughAHandOver(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	// 40 chunks of 250 ms: the first attempt is still streaming when the
	// second worker has started, however busy the machine (at 20 ms a
	// loaded run finished the turn before the first worker was stopped).
	first := startMember(t, srv.URL, fleet.Config{WorkerID: "first", ScriptedDelay: 250 * time.Millisecond, ShutdownGrace: time.Millisecond})
	nc := natstest.Connect(t, srv.URL)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	text := strings.TrimSpace(strings.Repeat("step ", 40))
	run, err := c.Send(ctx, "handed", text)
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	var stopped bool
	for ev, err := range run.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, describe(ev))
		if ev.Stream == events.StreamAssistant && !stopped {
			// The first attempt is streaming: a second worker comes, the
			// first goes.
			stopped = true
			startMember(t, srv.URL, fleet.Config{WorkerID: "second", ScriptedDelay: time.Millisecond})
			go first.stop()
		}
	}
	checkSeqs(t, "live viewer", live)
	joined := strings.Join(live, " ")
	for _, want := range []string{"lifecycle:aborted", "lifecycle:restart", "final:echo: " + text} {
		if !strings.Contains(joined, want) {
			t.Fatalf("live viewer missed %q:\n%s", want, joined)
		}
	}
	var replay []string
	for ev, err := range c.Run("handed", run.ID).Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		replay = append(replay, describe(ev))
	}
	if strings.Join(replay, " ") != joined {
		t.Fatalf("replay differs from the live view:\nlive   %s\nreplay %s", joined, strings.Join(replay, " "))
	}
	js := newJS(t, nc)
	if n := eventConsumers(t, js); n != 0 {
		t.Fatalf("%d consumers left on %s", n, events.EventStream)
	}
}

// TestFollowWhileNoWorkerRuns: the only worker stops mid-run; the viewer
// keeps asking (no responders is not the end), says no worker runs, and
// sees the run finish when a new worker starts.
func TestFollowWhileNoWorkerRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	only := startMember(t, srv.URL, fleet.Config{WorkerID: "only", ScriptedDelay: 20 * time.Millisecond, ShutdownGrace: time.Millisecond})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	text := strings.TrimSpace(strings.Repeat("again ", 40))
	run, err := c.Send(ctx, "orphan", text)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	noWorker := make(chan struct{})
	run.OnWait(200*time.Millisecond, func(w lanefleet.Wait) {
		if w.State == lanefleet.RunNoWorker {
			once.Do(func() {
				close(noWorker)
				// Nobody ran the lane for a while: a worker starts again.
				startMember(t, srv.URL, fleet.Config{WorkerID: "next"})
			})
		}
	})
	var seen []string
	for ev, err := range run.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, describe(ev))
		if ev.Stream == events.StreamAssistant && len(seen) < 4 {
			go only.stop()
		}
	}
	select {
	case <-noWorker:
	default:
		t.Fatal("the viewer never said no worker runs")
	}
	checkSeqs(t, "viewer", seen)
	if last := seen[len(seen)-1]; !strings.HasSuffix(last, "/final:echo: "+text) {
		t.Fatalf("ended with %q", last)
	}
}

// TestSendThroughALeaderLoss: on a 3-node cluster, the node leading the
// inbound stream goes away while a client sends; every Send succeeds (it
// waits out the election instead of reporting no fleet) and every run ends
// once.
func TestSendThroughALeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	t.Parallel()
	cl := natstest.StartCluster(t, 3)
	startMember(t, cl.URL(), fleet.Config{WorkerID: "cw", Replicas: 3, AckWait: 10 * time.Second, LeaseTTL: 10 * time.Second})
	nc := natstest.Connect(t, cl.URL())
	js, _ := jetstream.New(nc, jetstream.WithDefaultTimeout(10*time.Second))
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	leader := func() int {
		for {
			info, err := js.Stream(ctx, events.InboundStream)
			if err == nil && info.CachedInfo().Cluster != nil {
				for i, s := range cl.Servers {
					if s.Name() == info.CachedInfo().Cluster.Leader {
						return i
					}
				}
			}
			if ctx.Err() != nil {
				t.Fatal("no leader of the inbound stream")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	const n = 30
	var runs []*lanefleet.Run
	for i := range n {
		if i == n/3 {
			l := leader()
			t.Logf("stopping n%d, leader of %s", l+1, events.InboundStream)
			cl.Stop(l)
		}
		run, err := c.Send(ctx, fmt.Sprintf("elect:%d", i), fmt.Sprintf("m%d", i))
		if errors.Is(err, lanefleet.ErrNoFleet) {
			t.Fatalf("send %d during the election: %v", i, err)
		}
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		runs = append(runs, run)
	}
	for i, run := range runs {
		res, err := run.Wait(ctx)
		if err != nil || res.Payloads[0].Text != fmt.Sprintf("echo: m%d", i) {
			t.Fatalf("run %d (%s): %+v, %v", i, run.ID, res, err)
		}
	}
}

// describe renders an event for comparisons: stream, phase and, for the
// final, its reply.
func describe(ev *events.Event) string {
	s := fmt.Sprintf("%d/%s", ev.Seq, ev.Stream)
	switch {
	case ev.Terminal() && ev.Data.Result != nil && len(ev.Data.Result.Payloads) > 0:
		s += ":" + ev.Data.Result.Payloads[0].Text
	case ev.Data.Phase != "":
		s += ":" + ev.Data.Phase
	}
	return s
}

// checkSeqs asserts events numbered 1..n in order, each once.
func checkSeqs(t *testing.T, who string, described []string) {
	t.Helper()
	for i, d := range described {
		if !strings.HasPrefix(d, fmt.Sprintf("%d/", i+1)) {
			t.Fatalf("%s: event %d is %q:\n%s", who, i+1, d, strings.Join(described, " "))
		}
	}
}
