package fleet

import (
	"context"
	"runtime/debug"
	"time"
)

// GCPercent is the garbage collector's target a worker process runs with
// unless its environment sets GOGC: with Go's default (100) a worker
// spends about a fifth of its CPU collecting, since a turn allocates far
// more than it keeps; at 200 the CPU per turn falls 15–20% (lanebench
// -scenario turns, conc64 and conc256, same quiet machine) for about 20 MB
// more RSS idle, and 1,000 turns in flight stay under 400 MB.
const GCPercent = 200

// TuneGC sets the collector's target to GCPercent when getenv has no GOGC.
// A process calls it once, at start-up (cmd/worker, and cmd/lanebench so
// that it measures what the worker runs).
func TuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
}

// IdleReleaseDefault is how long a member runs no turn before it returns
// the memory it no longer uses to the operating system (Config.IdleRelease).
// The runtime gives back little of it by itself: it keeps what its next
// collection target (GCPercent over the heap in use) may need, so a worker
// that had been busy stayed at its peak RSS however long it then idled.
const IdleReleaseDefault = 30 * time.Second

// idleRelease decides when an idle member returns its free memory: once
// per idle spell, after the turn count has stayed the same for after.
type idleRelease struct {
	after time.Duration
	turns int64
	since time.Time // when turns last changed
	freed bool      // released since then
}

// observe notes the turn count at now and reports whether the member has
// now been idle long enough to release, which it reports once per spell.
func (r *idleRelease) observe(now time.Time, turns int64) bool {
	if r.since.IsZero() || turns != r.turns {
		r.turns, r.since, r.freed = turns, now, false
		return false
	}
	if r.freed || now.Sub(r.since) < r.after {
		return false
	}
	r.freed = true
	return true
}

// releaseWhenIdle returns the process's free memory to the operating
// system (debug.FreeOSMemory: a collection, then every free page released)
// once the member has run no turn for after, and again after each busy
// spell, until ctx ends. turns counts the member's turns so far.
func (m *Member) releaseWhenIdle(ctx context.Context, after time.Duration, turns func() int64) {
	r := idleRelease{after: after}
	tick := time.NewTicker(max(after/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if r.observe(now, turns()) {
				debug.FreeOSMemory()
				m.released.Add(1)
			}
		}
	}
}
