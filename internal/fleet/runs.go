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
// informational, so its writes stay off the turn's path, and a run shorter
// than registerAfter never writes it: the entry is written once the run has
// gone on that long (or at once when it starts compacting), and removed
// after the turn is committed. Most turns end before anyone could list
// them, and each entry costs two writes.
type registration struct {
	done  chan struct{} // closed once the entry is written, or will not be
	ended chan struct{} // closed when the run ends: nothing to register
	soon  chan struct{} // closed to register now
	once  sync.Once
	h     *kvstore.RunHandle // nil when not written
	bg    *sync.WaitGroup    // the member's background writes
}

// registerAfter is how long a run goes on before it is listed as active
// (Config.registerAfter overrides it in tests).
const registerAfter = 100 * time.Millisecond

func (m *Member) register(ctx context.Context, t *lanes.Turn) *registration {
	r := &registration{done: make(chan struct{}), ended: make(chan struct{}), soon: make(chan struct{}), bg: &m.bg}
	info := kvstore.RunInfo{Session: t.SessionKey, RunID: t.RunID, Worker: m.Worker.ID(), Attempt: t.Attempt, StartedAt: time.Now().UnixMilli()}
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
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
		defer cancel()
		h, err := m.Runs.Register(rctx, tok, info)
		if err != nil {
			m.log.Warn().Err(err).Str("run_id", t.RunID).Msg("run registry")
			return
		}
		r.h = h
	})
	return r
}

// handle writes the entry now if it is not written yet, and returns it.
func (r *registration) handle() *kvstore.RunHandle {
	r.once.Do(func() { close(r.soon) })
	<-r.done
	return r.h
}

// clear removes the entry once it is written (in the background); a run
// that ended before its entry was due never writes one.
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

// phaseSink shows a run's compactions in the active-run registry.
type phaseSink struct {
	runner.Sink
	reg *registration
	ctx context.Context
}

func (p phaseSink) Emit(stream string, data events.EventData) {
	p.Sink.Emit(stream, data)
	if stream != events.StreamCompaction {
		return
	}
	h := p.reg.handle()
	if h == nil {
		return
	}
	phase := "running"
	if data.Phase == "start" {
		phase = "compacting"
	}
	ctx, cancel := context.WithTimeout(p.ctx, stateTimeout)
	defer cancel()
	_ = h.SetPhase(ctx, phase)
}
