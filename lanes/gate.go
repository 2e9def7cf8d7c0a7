package lanes

import (
	"runtime"
	"sync"
	"time"
)

// setupGate bounds how many lanes set up a turn at once: from taking the
// lane's lease to handing the turn to the handler (the lease, the lane's
// cursor and message reads, the fence and the start event: a few
// round trips and synchronous writes each).
//
// When hundreds of sessions send in the same instant, every set-up
// competes for the same two cores and the same per-stream writes. Run all
// at once, each one finishes near the end of the burst, so every turn of
// the burst waits for the whole burst before its model is even called.
// Let through a few at a time, in arrival order (a channel's blocked
// senders queue in order), they finish one after another: the median turn
// waits for half the burst, the last one no longer than before, and the
// model calls of the first ones overlap the set-ups of the rest.
//
// A set-up that stalls (a slow store, a queue mode that waits for more
// messages) lets its place go after gateKeep, so one slow lane never keeps
// the others back for longer. The other side of that: when set-ups take
// longer than gateKeep (a worker far past overload), the gate no longer
// bounds how many run at once, only lets n more start every gateKeep.
type setupGate struct {
	ch   chan struct{}
	keep time.Duration // gateKeep, shorter in tests
}

// gateKeep is the longest one set-up keeps its place in the gate.
const gateKeep = 100 * time.Millisecond

// defaultSetups is the gate's width when Config.SetupConcurrency is 0:
// enough set-ups in flight to keep the cores busy while each waits on its
// writes (lanebench -scenario turns -turns-setup compares widths).
func defaultSetups() int { return 4 * runtime.GOMAXPROCS(0) }

// newSetupGate returns a gate n wide (0: defaultSetups; negative: none)
// whose places are kept at most keep (0: gateKeep).
func newSetupGate(n int, keep time.Duration) *setupGate {
	if n < 0 {
		return nil
	}
	if n == 0 {
		n = defaultSetups()
	}
	if keep <= 0 {
		keep = gateKeep
	}
	return &setupGate{ch: make(chan struct{}, n), keep: keep}
}

// enter waits for a place in the gate (at once when there is no gate) and
// returns the function that gives it back; calling that function more than
// once is harmless, and the place is given back by itself after keep. It
// gives up when shutdown is closed (ok false): a worker that shuts down
// sets up nothing more.
func (g *setupGate) enter(shutdown <-chan struct{}) (leave func(), ok bool) {
	if g == nil {
		return func() {}, true
	}
	select {
	case g.ch <- struct{}{}:
	case <-shutdown:
		return nil, false
	}
	var once sync.Once
	free := func() { once.Do(func() { <-g.ch }) }
	t := time.AfterFunc(g.keep, free)
	return func() {
		t.Stop()
		free()
	}, true
}
