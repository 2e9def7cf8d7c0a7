package lanes

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
)

// TestTurnsInFlightGoroutines: a turn in flight holds one goroutine, its
// own. Its lease's heartbeat holds none between renewals (it was a
// goroutine the owner started, parked on a ticker for the whole turn), and
// its lane's cut watch holds none (it was an async subscription, for which
// nats.go runs a goroutine each): the watches share one dispatcher per
// worker. Counted from the goroutines' stacks around 31 held turns; not
// parallel, so that no other test's goroutines come and go meanwhile.
func TestTurnsInFlightGoroutines(t *testing.T) {
	const n = 32
	f := newFleet(t, 30*time.Second, 30*time.Second)
	entered := make(chan struct{}, n)
	release := make(chan struct{})
	h := &echoHandler{hook: func(*Turn) error {
		entered <- struct{}{}
		<-release
		return nil
	}}
	stop := f.startWorker(t, h, Config{Concurrency: n})
	defer stop()
	defer close(release) // before stop: the held turns end, then the worker
	// One turn first, so that what a worker starts once (the watches'
	// dispatcher, the consumer's) is in the baseline.
	f.publish(t, "warm", "x")
	<-entered
	before := goroutinesByCreator()
	for i := range n - 1 {
		f.publish(t, fmt.Sprintf("s%d", i), "x")
	}
	for range n - 1 {
		<-entered
	}
	after := goroutinesByCreator()
	held := n - 1
	delta := map[string]int{}
	total := 0
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			delta[k] = d
			total += d
		}
	}
	for k, v := range before {
		if _, ok := after[k]; !ok {
			delta[k] = -v
			total -= v
		}
	}
	t.Logf("%d more goroutines for %d more turns in flight: %s", total, held, describe(delta))
	t.Run("heartbeat", func(t *testing.T) {
		// The old heartbeat was a goroutine each owner's run started.
		if d := delta[creator("lanes.(*owner).run")]; d >= held/4 {
			t.Errorf("%d goroutines started by owners' runs for %d turns in flight; a lease's heartbeat should hold none between renewals", d, held)
		}
	})
	t.Run("watch", func(t *testing.T) {
		if d := delta[asyncSubs]; d >= held/4 {
			t.Errorf("%d more nats.go subscription goroutines for %d turns in flight; a lane's watch should hold none", d, held)
		}
	})
	t.Run("total", func(t *testing.T) {
		if total > held+held/2 {
			t.Errorf("%d more goroutines for %d more turns in flight; want about one a turn (its own)", total, held)
		}
	})

}

// waitForMsgs stands for the goroutines nats.go runs for async
// subscriptions (matched in their stacks).
const waitForMsgs = ".(*Conn).waitForMsgs("

// asyncSubs counts the goroutines parked under waitForMsgs.
const asyncSubs = "nats.go async subscriptions (waitForMsgs)"

// creator names a goroutine by the function that started it (fn within
// this module).
func creator(fn string) string { return "created by github.com/lanefleet/lanefleet/" + fn }

// goroutinesByCreator counts the process's goroutines by the function
// that started them ("created by …"), and those parked in nats.go's async
// subscription loop under waitForMsgs.
func goroutinesByCreator() map[string]int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]int{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		if strings.Contains(s, waitForMsgs) {
			out[asyncSubs]++
			continue
		}
		i := strings.Index(s, "created by ")
		if i < 0 {
			out["(no creator)"]++
			continue
		}
		line, _, _ := strings.Cut(s[i:], " in goroutine")
		line, _, _ = strings.Cut(line, "\n")
		out[line]++
	}
	return out
}

// describe lists counts by creator, largest first.
func describe(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %+d %s", m[k], k)
	}
	return b.String()
}

// TestHeartbeatRenewsUntilStopped: a lease's heartbeat renews it every
// third of its TTL, from a timer, for as long as the drain runs; after
// stop nothing renews it, so its release is not raced.
func TestHeartbeatRenewsUntilStopped(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second, 600*time.Millisecond)
	w := f.newWorker(t, natstest.Connect(t, f.url), &echoHandler{}, Config{}, zerolog.WarnLevel)
	lease, err := w.lanes.Acquire(t.Context(), "hb", kvstore.LeaseInfo{Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	o := w.newOwner("hb", "hb", "agent.in.hb", ownerLease{Lease: lease}, 0)
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	hb := o.startHeartbeat(ctx, cancel, lease)
	rev := lease.Revision()
	// Three renewals: the lease outlives its TTL (600 ms) by as much.
	waitFor(t, "three renewals", func() bool { return lease.Revision() >= rev+3 })
	if err := context.Cause(ctx); err != nil {
		t.Fatalf("the drain's context ended: %v", err)
	}
	if _, held, err := w.lanes.Holder(t.Context(), "hb"); err != nil || !held {
		t.Fatalf("lease held = %v (%v) while its heartbeat runs", held, err)
	}
	cancel(nil)
	hb.stop()
	stopped := lease.Revision()
	hb.beat() // a timer that fired as stop was called
	if got := lease.Revision(); got != stopped {
		t.Fatalf("renewed after stop: revision %d, was %d", got, stopped)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatalf("release after stop: %v", err)
	}
}

// TestWatchRoutesBySubscription: the worker's dispatcher hands a watched
// message to its own subscription's watch only: a message left for a
// watch that ended reaches neither it nor the lane's next watch. A message
// nats.go dropped because the channel was full keeps the lane from being
// taken for empty, and is counted when the watch ends.
func TestWatchRoutesBySubscription(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	const subj = "agent.in.watched"
	newQuiet := func() *quietWatch {
		return &quietWatch{notify: make(chan struct{}, 1), stored: make(chan struct{}, 1), now: time.Now}
	}
	ws := &laneWatches{ch: make(chan *nats.Msg, 1), by: map[*nats.Subscription]*quietWatch{}}
	t.Cleanup(ws.close)
	q1 := newQuiet()
	if err := ws.add(nc, subj, q1); err != nil {
		t.Fatal(err)
	}
	ws.hand(&nats.Msg{Subject: subj, Sub: q1.sub})
	if n := q1.arrivals.Load(); n != 1 {
		t.Fatalf("the watch saw %d arrivals, want 1", n)
	}
	if dropped := ws.remove(q1); dropped != 0 {
		t.Fatalf("%d dropped", dropped)
	}
	q2 := newQuiet()
	if err := ws.add(nc, subj, q2); err != nil {
		t.Fatal(err)
	}
	ws.hand(&nats.Msg{Subject: subj, Sub: q1.sub}) // left in the channel by the first watch
	if a, b := q1.arrivals.Load(), q2.arrivals.Load(); a != 1 || b != 0 {
		t.Fatalf("a message of the ended watch: arrivals %d and %d, want 1 and 0", a, b)
	}

	// Hold the dispatcher (it hands over under mu) while three messages
	// arrive: one it took, one in the channel (of 1), one dropped.
	ws.mu.Lock()
	for range 3 {
		if err := nc.Publish(subj, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "nats.go to drop a message", func() bool { n, _ := q2.sub.Dropped(); return n >= 1 })
	ws.mu.Unlock()
	waitFor(t, "the messages not dropped", func() bool { return q2.arrivals.Load() == 2 })
	reconnects := nc.Stats().Reconnects
	q2.after(true, 7, q2.before(), reconnects)
	if q2.empty(7, reconnects) {
		t.Fatal("the lane taken for empty with a watched message dropped")
	}
	if dropped := ws.remove(q2); dropped != 1 {
		t.Fatalf("%d dropped, want 1", dropped)
	}
}

// TestWatchJudgesInOrder: a lane's messages that arrive while a turn runs
// are judged in the order they were published, through the worker's one
// channel and the watch's line: of an interrupt and a stop behind a run of
// prompts that cut nothing, the first to arrive names the cut.
func TestWatchJudgesInOrder(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	for _, c := range []struct {
		name   string
		cuts   []*events.Inbound
		target error
	}{
		{name: "interrupt first", cuts: []*events.Inbound{{Text: "now", Mode: "interrupt"}, {Stop: true}}, target: errInterrupted},
		{name: "stop first", cuts: []*events.Inbound{{Stop: true}, {Text: "now", Mode: "interrupt"}}, target: errStopped},
	} {
		t.Run(c.name, func(t *testing.T) {
			subj := "agent.in.order-" + strings.ReplaceAll(c.name, " ", "-")
			nop := zerolog.Nop()
			ws := &laneWatches{}
			t.Cleanup(ws.close)
			q := &quietWatch{notify: make(chan struct{}, 1), stored: make(chan struct{}, 1),
				maxPayload: events.DefaultMaxPayload, now: time.Now, log: &nop, stats: &Stats{}}
			if err := ws.add(nc, subj, q); err != nil {
				t.Fatal(err)
			}
			defer ws.remove(q)
			ctx, cancel := context.WithCancelCause(t.Context())
			q.target.Store(&cutTarget{cancel: cancel})
			const prompts = 100
			msgs := make([]*events.Inbound, 0, prompts+len(c.cuts))
			for i := range prompts {
				msgs = append(msgs, &events.Inbound{Text: fmt.Sprint("queued ", i)})
			}
			for _, in := range append(msgs, c.cuts...) {
				if err := nc.PublishMsg(inboundMsg(t, subj, in)); err != nil {
					t.Fatal(err)
				}
			}
			<-ctx.Done()
			if got := context.Cause(ctx); got != c.target {
				t.Fatalf("cut by %v, want %v (the first cutting message published)", got, c.target)
			}
			waitFor(t, "every message seen", func() bool { return q.arrivals.Load() == uint64(prompts+len(c.cuts)) })
		})
	}
}

// TestWatchLineFullWhileJudging: a message past the line's limit, arriving
// while the line is being judged, is counted and logged without reading
// the line unguarded (under -race this failed: the warning read the
// line's length after its lock was let go, as judgeLine took from it).
func TestWatchLineFullWhileJudging(t *testing.T) {
	t.Parallel()
	nop := zerolog.Nop()
	stats := &Stats{}
	huge := &nats.Msg{Subject: "agent.in.full", Data: make([]byte, nats.DefaultSubPendingBytesLimit)}
	const rounds = 20000
	for range rounds {
		q := &quietWatch{notify: make(chan struct{}, 1), stored: make(chan struct{}, 1),
			maxPayload: events.DefaultMaxPayload, now: time.Now, log: &nop, stats: stats}
		q.target.Store(&cutTarget{cancel: func(error) {}})
		q.arrived(&nats.Msg{Subject: "agent.in.full", Data: []byte("{}"), Header: nats.Header{}})
		q.arrived(huge) // past the byte limit: not judged
		q.closeLine()
	}
	if n := stats.WatchDropped.Load(); n != rounds {
		t.Fatalf("%d counted not judged, want %d", n, rounds)
	}
}
