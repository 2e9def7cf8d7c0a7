package lanes

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/lanes/internal/slots"
)

// TestDebounceWait: a collect batch's debounce wait (laneWatch.wait)
// returns at its deadline while the lane stays quiet, a recheck after a
// message arrives, one poll from now at the latest, and at once when the
// worker shuts down or the drain ends. It runs in a synctest bubble: the
// times are exact and nothing waits on the wall clock.
func TestDebounceWait(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		d        time.Duration // until the batch's deadline
		arrive   time.Duration // two messages arrive then; 0 = none
		shutdown bool
		cancel   bool
		want     time.Duration
		wantErr  error
	}{
		{name: "quiet until the deadline", d: 300 * time.Millisecond, want: 300 * time.Millisecond},
		{name: "a deadline past one poll", d: time.Minute, want: debouncePoll},
		{name: "a deadline passed", d: -time.Second, want: 0},
		{name: "messages arrive", d: time.Minute, arrive: 100 * time.Millisecond, want: 100*time.Millisecond + debounceRecheck},
		{name: "shutdown", d: time.Minute, shutdown: true, wantErr: errShuttingDown},
		{name: "the drain ends", d: time.Minute, cancel: true, wantErr: context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				w := &laneWatch{notify: make(chan *nats.Msg, 64)}
				shutdown := make(chan struct{})
				if c.shutdown {
					close(shutdown)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if c.cancel {
					cancel()
				}
				if c.arrive > 0 {
					time.AfterFunc(c.arrive, func() { w.notify <- &nats.Msg{}; w.notify <- &nats.Msg{} })
				}
				start := time.Now()
				err := w.wait(ctx, c.d, shutdown)
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("wait: %v, want %v", err, c.wantErr)
				}
				if got := time.Since(start); got != c.want {
					t.Fatalf("wait returned after %v, want %v", got, c.want)
				}
				if len(w.notify) != 0 {
					t.Fatalf("%d notices left: a wait takes every notice that woke it", len(w.notify))
				}
			})
		})
	}
}

// TestLingerEnds: an owner lingers on an empty lane for Config.Linger and
// no longer; a message arriving meanwhile (or since the lane was found
// empty) ends the linger with yes, and the worker's shutdown or a lane
// waiting for a slot ends or prevents it. In a synctest bubble.
func TestLingerEnds(t *testing.T) {
	t.Parallel()
	const linger = 10 * time.Second
	cases := []struct {
		name     string
		linger   time.Duration
		arrive   time.Duration // a message arrives then; 0 = none
		earlier  bool          // a message arrived before the linger began
		shutdown time.Duration // the worker shuts down then; 0 = never
		waiting  bool          // a lane waits for a slot
		want     bool
		took     time.Duration
	}{
		{name: "nothing arrives", linger: linger, took: linger},
		{name: "a message arrives", linger: linger, arrive: 3 * time.Second, want: true, took: 3 * time.Second},
		{name: "a message arrived before", linger: linger, earlier: true, want: true},
		{name: "the worker shuts down", linger: linger, shutdown: 2 * time.Second, took: 2 * time.Second},
		{name: "a lane waits for the slot", linger: linger, waiting: true},
		{name: "no linger", linger: -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				w := &Worker{cfg: Config{Linger: c.linger}.withDefaults(), sched: slots.New(1, 0, slots.Shares{}), shutdown: make(chan struct{})}
				q := &quietWatch{notify: make(chan struct{}, 1)}
				q.notify <- struct{}{} // a stale token from before the lane was found empty
				if c.earlier {
					q.arrivals.Add(1)
				}
				o := w.newOwner("", "", "", ownerLease{}, 0)
				o.quiet = q
				if c.waiting {
					w.sched.Take("mine", 0, time.Now())
					w.sched.Wait("other", 0, time.Now(), false)
				}
				if c.arrive > 0 {
					time.AfterFunc(c.arrive, func() { q.notify <- struct{}{} })
				}
				if c.shutdown > 0 {
					time.AfterFunc(c.shutdown, func() { w.shuttingDown.Store(true); close(w.shutdown) })
				}
				start := time.Now()
				if got := o.linger(t.Context()); got != c.want {
					t.Fatalf("linger = %v, want %v", got, c.want)
				}
				if got := time.Since(start); got != c.took {
					t.Fatalf("lingered %v, want %v", got, c.took)
				}
				if n := w.lingering.Load(); n != 0 {
					t.Fatalf("%d owners still counted lingering", n)
				}
			})
		})
	}
}
