package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/runner"
)

// registration is a run's entry in the active-run registry. The registry is
// informational, so its writes stay off the turn's path: one goroutine a
// run (the registry goroutine) makes them all, and the run only hands it
// what to write. A run shorter than registerAfter never writes it: the
// entry is written once the run has gone on that long (or at once when it
// starts compacting), and removed after the turn is committed. Most turns
// end before anyone could list them, and each entry costs two writes.
type registration struct {
	done  chan struct{} // closed when the registry goroutine has ended
	ended chan struct{} // closed when the run ends: nothing more to write
	soon  chan struct{} // closed to register now
	once  sync.Once
	h     *kvstore.RunHandle // nil when not written; set before done closes
	bg    *sync.WaitGroup    // the member's background writes

	// phase is the run's latest phase not written yet ("" = none); a
	// value in phased says there is one. Only the latest is written.
	mu     sync.Mutex
	phase  string
	phased chan struct{} // capacity 1
}

// registerAfter is how long a run goes on before it is listed as active
// (Config.registerAfter overrides it in tests).
const registerAfter = 100 * time.Millisecond

// register starts a turn's registry goroutine: it writes the entry once
// the run is due, then the phases the run hands it, until the run ends.
func (m *Member) register(ctx context.Context, t *lanes.Turn) *registration {
	r := &registration{done: make(chan struct{}), ended: make(chan struct{}), soon: make(chan struct{}),
		phased: make(chan struct{}, 1), bg: &m.bg}
	info := kvstore.RunInfo{Session: t.SessionKey, RunID: t.RunID, Worker: m.Worker.ID(), Attempt: t.Attempt, StartedAt: time.Now().UnixMilli()}
	log := m.log.With().Str("run_id", t.RunID).Logger()
	wctx := context.WithoutCancel(ctx) // the entry outlives the turn's cancellation until clear
	m.bg.Go(func() {
		defer close(r.done)
		after := registerAfter
		if m.cfg.registerAfter > 0 {
			after = m.cfg.registerAfter
		}
		wait := time.NewTimer(after)
		defer wait.Stop()
		select {
		case <-wait.C:
		case <-r.soon:
		case <-r.ended:
			return
		}
		tok, _ := events.KeyToken(t.SessionKey)
		rctx, cancel := context.WithTimeout(wctx, stateTimeout)
		h, err := m.Runs.Register(rctx, tok, info)
		cancel()
		if err != nil {
			log.Warn().Err(err).Msg("run registry")
			return
		}
		r.h = h
		failed := false // a failed phase write is logged once a run
		for {
			select {
			case <-r.ended:
				return
			case <-r.phased:
			}
			r.mu.Lock()
			phase := r.phase
			r.phase = ""
			r.mu.Unlock()
			if phase == "" {
				continue
			}
			pctx, cancel := context.WithTimeout(wctx, stateTimeout)
			err := h.SetPhase(pctx, phase)
			cancel()
			if err != nil && !failed {
				failed = true
				log.Warn().Err(err).Str("phase", phase).Msg("run registry: phase not written (later failures of this run are not logged)")
			}
		}
	})
	return r
}

// setPhase hands the registry goroutine the run's phase, and has the
// entry written now if it is not yet; it never waits for a write.
func (r *registration) setPhase(phase string) {
	r.mu.Lock()
	r.phase = phase
	r.mu.Unlock()
	select {
	case r.phased <- struct{}{}:
	default: // one is pending already: it writes the latest
	}
	r.once.Do(func() { close(r.soon) })
}

// clear ends the registry goroutine and removes the entry once it is
// written (in the background); a run that ended before its entry was due
// never writes one.
func (r *registration) clear(ctx context.Context) {
	close(r.ended)
	r.bg.Go(func() {
		<-r.done
		if h := r.h; h != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
			defer cancel()
			_ = h.Clear(cctx)
		}
	})
}

// phaseSink shows a run's compactions in the active-run registry. Emit
// runs on the runner's goroutine: it hands the phase to the registry
// goroutine and returns.
type phaseSink struct {
	runner.Sink
	reg *registration
}

func (p phaseSink) Emit(stream string, data events.EventData) {
	p.Sink.Emit(stream, data)
	if stream != events.StreamCompaction {
		return
	}
	phase := kvstore.RunPhaseRunning
	if data.Phase == events.PhaseStart {
		phase = kvstore.RunPhaseCompacting
	}
	p.reg.setPhase(phase)
}
