package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/runner"
)

// registration is a run's entry in the active-run registry. The registry is
// informational, so its writes stay off the turn's path: a writer
// goroutine makes them, and the run only hands it what to write. A run
// shorter than registerAfter never writes it: the entry is written once the
// run has gone on that long (or at once when it starts compacting), and
// removed after the turn is committed. Most turns end before anyone could
// list them, and each entry costs two writes.
//
// No goroutine waits with the run: the member's due line (dueLine)
// starts the writer when the entry is due, and the writer ends once it
// has written what it was handed. A long turn in flight (a slow model)
// holds only this struct and its place in the line, not a goroutine's
// stack for the whole of its wait, nor a timer of its own.
type registration struct {
	m    *Member
	tok  string
	info kvstore.RunInfo
	wctx context.Context // the turn's values, never cancelled: the entry outlives the turn's cancellation until clear
	at   time.Time       // when the entry is due

	mu      sync.Mutex
	started bool               // the writer was started (the entry is being or was written)
	writing bool               // the writer runs; it takes phase until none is left or the run ends
	ended   bool               // the run ended: nothing more to write
	h       *kvstore.RunHandle // nil when not written
	phase   string             // the run's latest phase not written yet ("" = none)
	failed  bool               // a failed phase write was logged (once a run)
	idle    chan struct{}      // closed when the writer stops after the run ended (nil: not waited for)
}

// registerAfter is how long a run goes on before it is listed as active
// (Config.registerAfter overrides it in tests).
const registerAfter = 100 * time.Millisecond

// register arms a turn's registry entry: written once the run is due,
// then the phases the run hands it, until the run ends.
func (m *Member) register(ctx context.Context, t *lanes.Turn) *registration {
	tok, _ := events.KeyToken(t.SessionKey)
	r := &registration{m: m, tok: tok, wctx: context.WithoutCancel(ctx),
		info: kvstore.RunInfo{Session: t.SessionKey, RunID: t.RunID, Worker: m.Worker.ID(), Attempt: t.Attempt, StartedAt: time.Now().UnixMilli()}}
	after := registerAfter
	if m.cfg.registerAfter > 0 {
		after = m.cfg.registerAfter
	}
	m.bg.Add(1) // done by clear once the writes have ended: a stopping member waits for them
	m.due.add(r, after)
	return r
}

// due starts the writer when the entry's time has come (the due line's
// timer), unless it was started already or the run has ended.
func (r *registration) due() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.startLocked()
}

// dueLine starts the writers of a member's registrations as they fall
// due, with one timer for them all: every registration is due the same
// time after it was made, so they fall due in the order they were made.
// A timer each was 112 bytes and a span's worth of slack a turn held
// while its model answered (docs/scaling.md, "What a turn in flight
// holds"). A registration that ended stays in line until it is due, and
// is passed over then. The timer is set dueGrain after the first one's
// time, so that it goes off once for the registrations that fall due
// within that time (a busy worker's short turns would have it go off
// once a turn), not once for each.
type dueLine struct {
	mu    sync.Mutex
	line  []*registration // in the order they fall due; line[head:] wait
	head  int
	timer *time.Timer // set to the first waiting one's time while any wait
}

// dueGrain is how late the due line may start a writer: its timer goes
// off at most once in that time.
const dueGrain = 10 * time.Millisecond

// add puts r, due after that long, at the end of the line.
func (d *dueLine) add(r *registration, after time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r.at = time.Now().Add(after) // under d.mu: the line stays in the order of r.at
	d.line = append(d.line, r)
	if len(d.line)-d.head > 1 {
		return // the timer is set for one before it
	}
	if d.timer == nil {
		d.timer = time.AfterFunc(time.Until(r.at)+dueGrain, d.fire)
	} else {
		d.timer.Reset(time.Until(r.at) + dueGrain)
	}
}

// stop stops the timer and lets go of the line, once every registration
// of the member has ended (Member.close, after Run waited for them): an
// armed timer held the stopped member, and the registrations that had
// ended in line, until it went off (a test's registerAfter of an hour).
func (d *dueLine) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.line, d.head = nil, 0
}

// fire starts the writers of the registrations that are due, and sets
// the timer for the next one.
func (d *dueLine) fire() {
	now := time.Now()
	d.mu.Lock()
	var due []*registration
	for d.head < len(d.line) && !d.line[d.head].at.After(now) {
		due = append(due, d.line[d.head])
		d.line[d.head] = nil
		d.head++
	}
	if d.head == len(d.line) {
		d.line, d.head = d.line[:0], 0
	} else {
		if d.head > len(d.line)/2 {
			// Keep the array from growing: the waiting ones to its front.
			n := copy(d.line, d.line[d.head:])
			clear(d.line[n:])
			d.line, d.head = d.line[:n], 0
		}
		d.timer.Reset(time.Until(d.line[d.head].at) + dueGrain)
	}
	d.mu.Unlock()
	for _, r := range due {
		r.due()
	}
}

// startLocked starts the writer once: it writes the entry, then the
// phases handed to it. The caller holds r.mu.
func (r *registration) startLocked() {
	if r.started || r.ended {
		return
	}
	r.started, r.writing = true, true
	go r.write() // counted in m.bg by the registration, until clear
}

// log is the registry's logger for this run.
func (r *registration) log() *zerolog.Logger {
	l := r.m.log.With().Str("run_id", r.info.RunID).Logger()
	return &l
}

// write is the writer: the entry when it was never written, then each
// phase handed to it. It ends when nothing is left to write (setPhase
// starts it again) or the run has ended, and then wakes clear.
func (r *registration) write() {
	r.mu.Lock()
	if r.h == nil && !r.ended {
		r.mu.Unlock()
		rctx, cancel := context.WithTimeout(r.wctx, stateTimeout)
		h, err := r.m.Runs.Register(rctx, r.tok, r.info)
		cancel()
		if err != nil {
			r.log().Warn().Err(err).Msg("run registry")
		}
		r.mu.Lock()
		if err != nil {
			// No entry: nothing more is written for this run.
			r.phase, r.writing = "", false
			r.stopLocked()
			r.mu.Unlock()
			return
		}
		r.h = h
	}
	for r.phase != "" && !r.ended {
		phase := r.phase
		r.phase = ""
		r.mu.Unlock()
		pctx, cancel := context.WithTimeout(r.wctx, stateTimeout)
		err := r.h.SetPhase(pctx, phase)
		cancel()
		r.mu.Lock()
		if err != nil && !r.failed {
			r.failed = true
			r.log().Warn().Err(err).Str("phase", phase).Msg("run registry: phase not written (later failures of this run are not logged)")
		}
	}
	r.writing = false
	r.stopLocked()
	r.mu.Unlock()
}

// stopLocked wakes clear's wait when the run has ended and the writer
// has stopped. The caller holds r.mu.
func (r *registration) stopLocked() {
	if r.ended && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
}

// setPhase hands the writer the run's phase, and has the entry written
// now if it is not yet; it never waits for a write.
func (r *registration) setPhase(phase string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended || (r.started && r.h == nil && !r.writing) {
		return // over, or the entry's write failed: no phase without it
	}
	r.phase = phase
	if !r.started {
		r.startLocked()
		return
	}
	if !r.writing {
		r.writing = true
		go r.write()
	}
}

// clear ends the registration and removes the entry once it is written
// (in the background, after the writer has stopped); a run that ended
// before its entry was due never writes one.
func (r *registration) clear(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	r.ended = true
	if !r.started || (r.h == nil && !r.writing) {
		r.m.bg.Done()
		return
	}
	var idle chan struct{}
	if r.writing {
		idle = make(chan struct{})
		r.idle = idle
	}
	go func() {
		defer r.m.bg.Done()
		if idle != nil {
			<-idle
		}
		r.mu.Lock()
		h := r.h
		r.mu.Unlock()
		if h != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
			defer cancel()
			_ = h.Clear(cctx)
		}
	}()
}

// phaseSink shows a run's compactions in the active-run registry. Emit
// runs on the runner's goroutine: it hands the phase to the registry's
// writer and returns.
type phaseSink struct {
	runner.Sink
	reg *registration
}

// Emit has a pointer receiver: the value's autogenerated method wrapper
// would copy data once more on the turn's stack, where a model's streamed
// deltas are emitted (docs/scaling.md, "What a turn in flight holds").
func (p *phaseSink) Emit(stream string, data events.EventData) {
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
