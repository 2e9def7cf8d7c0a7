package fleet

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/internal/version"
	"github.com/lanefleet/lanefleet/lanes"
)

// rateWindow is the span a worker's turn rate is measured over.
const rateWindow = 10 * time.Second

// turnRate is a counter's rate over the last rateWindow: sample records
// the counter once a second (the member's ticker), rate compares the
// newest sample with the one a window before it.
type turnRate struct {
	mu      sync.Mutex
	samples []rateSample // oldest first, one a second, rateWindow's worth
}

type rateSample struct {
	at time.Time
	n  int64
}

// sample records the counter's value n at now.
func (r *turnRate) sample(now time.Time, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, rateSample{now, n})
	// Keep the samples within the window, and the one just before it.
	for len(r.samples) > 2 && now.Sub(r.samples[1].at) >= rateWindow {
		r.samples = r.samples[1:]
	}
}

// rate returns the counter's increase per second between the oldest and
// the newest sample (0 with fewer than two).
func (r *turnRate) rate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) < 2 {
		return 0
	}
	a, b := r.samples[0], r.samples[len(r.samples)-1]
	d := b.at.Sub(a.at)
	if d <= 0 || b.n < a.n {
		return 0
	}
	return float64(b.n-a.n) / d.Seconds()
}

// workerStats is what the member's admin service reports of it in
// micro's STATS.
func (m *Member) workerStats() admin.WorkerStats {
	w := m.Worker
	return admin.WorkerStats{Worker: w.ID(), Version: version.Get().Version, SlotsUsed: w.Active(), SlotsTotal: w.Slots(),
		LanesHeld: w.Held(), LanesWaiting: w.Waiting(), Turns: w.Stats().Turns.Load(), TurnsPerSec: m.rate.rate(),
		Now: time.Now().UnixMilli()}
}

// sampleTurns records the worker's turn counter once a second until done
// is closed.
func (m *Member) sampleTurns(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	m.rate.sample(time.Now(), m.Worker.Stats().Turns.Load())
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			m.rate.sample(now, m.Worker.Stats().Turns.Load())
		}
	}
}

// forgetBusyWait bounds how long forget waits for a busy session to come
// free: a turn's owner still commits, acks and lets its lane go (after its
// linger) once the final event is out, so a session forgotten right after
// its last reply is busy for a moment; a turn that runs stays busy.
var forgetBusyWait = backoff.Policy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}

// forgetBusyTries is how many times forget asks again (about 1.5 s in all).
const forgetBusyTries = 10

// forget forgets an idle session for the admin service; busy says the
// session still runs (or holds) a turn after forgetBusyTries waits.
func (m *Member) forget(ctx context.Context, key string) (int, bool, error) {
	for try := 1; ; try++ {
		n, err := m.Worker.Forget(ctx, key)
		if !errors.Is(err, lanes.ErrBusy) {
			if err == nil {
				m.endSession(key)
			}
			return n, false, err
		}
		if try == forgetBusyTries {
			return 0, true, err
		}
		if werr := forgetBusyWait.Wait(ctx, try); werr != nil {
			return 0, true, err
		}
	}
}
