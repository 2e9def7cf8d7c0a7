package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/reply"
	"github.com/lanefleet/lanefleet/kvstore"
)

// Fast takeover (Config.Liveness). A worker keeps a life in the liveness
// bucket, beating every LivenessEvery, and answers requests on
// agent.alive.<life> while it is connected; its leases name the life.
// Every worker watches the others' lives. A worker is dead when
//
//   - its connection is gone: a beat is late by half a period and a
//     request to its alive subject finds no responder (the server dropped
//     its subscription: the process died, or it lost its connection).
//     The first worker to find that declares it dead (ends its life at
//     the revision it saw; a beat since keeps it alive); or
//   - its life lapsed: it kept its connection but beat not once for the
//     liveness TTL (paused, starved). A worker slower than that is as
//     good as dead to its sessions.
//
// Slowness alone never declares a worker dead before the TTL: an
// overloaded worker still answers, or at least still holds its
// subscription, so its probe times out rather than finding nobody.
//
// Whoever sees a life end takes over the lanes whose leases name it, each
// with a fenced write over the dead lease (kvstore.Lanes.TakeOver: the
// dead worker's writes fail from then on as after a lapse), and drains
// them from their cursors as any new owner does: a turn it was running
// is re-run (its step journal replayed), a committed turn's owed final
// events are published. It then sweeps, at once, the lanes with messages
// that nobody holds: the dead worker's deliveries in hand. The dead
// worker's un-acked deliveries come back after AckWait and find their
// messages processed (gone, or behind the cursor) or their lane held by
// the new owner (a follower).
//
// A worker that comes back after being declared dead finds its beat
// refused (kvstore.ErrDeclaredDead): it stops every owner of its old life
// at once (their leases are gone; their writes would fail the fence), and
// begins a new life. One whose beat loop wakes up a TTL late (the process
// was frozen) stops them before beating.

// life is one life of this worker: its key and a context ended (with the
// cause ErrLeaseLost) when the life is over.
type life struct {
	key     string
	started int64 // Unix ms
	ctx     context.Context
	end     context.CancelCauseFunc
	pulse   *kvstore.Pulse
	sub     *nats.Subscription // answers on the alive subject
	// base and until: the life lasts, as far as this worker knows, until
	// base+until (until in ns, moved on by each beat confirmed: the time
	// it was sent plus the TTL). Measured on the monotonic clock, so a
	// frozen process finds it passed as soon as it runs again.
	base  time.Time
	until atomic.Int64
}

// check returns why the life may be over: it ended (its cause: the lease
// is lost), or no beat was confirmed for the liveness TTL (lapsed: the
// worker was frozen or cut off from its store that long, and the others
// may have taken its lanes, or the store may only be down; the beat loop
// finds out which). A nil life is never over.
func (l *life) check() (lapsed bool, err error) {
	if l == nil {
		return false, nil
	}
	if l.ctx.Err() != nil {
		return false, context.Cause(l.ctx)
	}
	if time.Since(l.base) > time.Duration(l.until.Load()) {
		return true, fmt.Errorf("lanes: no beat confirmed for the liveness TTL: %w", kvstore.ErrDeclaredDead)
	}
	return false, nil
}

// confirmed moves the life's end on: a beat sent at sent (since base)
// was stored.
func (l *life) confirmed(sent, ttl time.Duration) {
	l.until.Store(int64(sent + ttl))
}

// bind makes the end of the life cancel an owner's drain; the returned
// func unbinds it. A nil life binds nothing.
func (l *life) bind(cancel context.CancelCauseFunc) func() {
	if l == nil {
		return func() {}
	}
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	return func() { stop() }
}

// leaseInfo is what a lease this worker takes now says: its id, the time,
// the trigger's sequence (0 for none) and its life, returned too.
func (w *Worker) leaseInfo(trigger uint64) (kvstore.LeaseInfo, *life) {
	info := kvstore.LeaseInfo{Worker: w.cfg.ID, Acquired: w.now().UnixMilli(), Trigger: trigger}
	lf := w.life.Load()
	if lf != nil {
		info.Life = lf.key
	}
	return info, lf
}

// peer is another worker's life as the watch saw it.
type peer struct {
	worker  string
	left    bool // it said it stopped after handing its lanes over
	rev     uint64
	seen    time.Time // when its last beat was seen (this worker's clock)
	probing bool
}

// liveness is the worker's part in fast takeover.
type liveness struct {
	mu    sync.Mutex
	peers map[string]*peer     // life key → the last beat seen
	ended map[string]time.Time // lives whose lanes this worker took over, when
	// reconnects is this worker's connection's reconnect count when the
	// probe last looked.
	reconnects uint64
	wg         sync.WaitGroup // the watch, the probes, the takeovers
}

// startLiveness begins the worker's life (answering on its alive subject
// first, so a probe never finds it missing) and starts its beat, the
// watch of the others' lives and the probe of late ones. The watch and
// the probe (and the takeovers they start) run until stopWatching, called
// when the worker begins to shut down; the beat runs on until end, called
// once the worker's turns are over, which also ends the life.
func (w *Worker) startLiveness() (stopWatching, end func(), err error) {
	beatCtx, stopBeat := context.WithCancel(context.Background())
	ctx, stopWatch := context.WithCancel(context.Background())
	lf, err := w.beginLife(beatCtx)
	if err != nil {
		stopBeat()
		stopWatch()
		return nil, nil, err
	}
	w.alive = &liveness{peers: map[string]*peer{}, ended: map[string]time.Time{}}
	var beating sync.WaitGroup
	beating.Go(func() { w.beat(beatCtx, lf) })
	wg := &w.alive.wg
	ready := make(chan struct{})
	wg.Go(func() {
		for ctx.Err() == nil {
			err := w.cfg.Liveness.Watch(ctx, w.onLife, func() { closeOnce(ready) })
			if err != nil && ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("watch the workers' lives")
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	wg.Go(func() { w.probeLate(ctx) })
	select {
	case <-ready:
	case <-ctx.Done():
	case <-time.After(readTimeout):
		w.log.Warn().Msg("the workers' lives did not load in time: watching on")
	}
	stopWatching = func() { stopWatch(); wg.Wait() }
	return stopWatching, func() {
		stopWatching()
		stopBeat()
		beating.Wait()
		if cur := w.life.Load(); cur != nil && w.nc.IsConnected() {
			ectx, cancel := context.WithTimeout(context.Background(), readTimeout)
			defer cancel()
			if err := cur.pulse.End(ectx, kvstore.Life{Worker: w.cfg.ID, Started: cur.started}); err != nil {
				w.log.Debug().Err(err).Msg("end life")
			}
		}
		if cur := w.life.Load(); cur != nil {
			_ = cur.sub.Unsubscribe()
		}
	}, nil
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// beginLife starts a new life: it subscribes to the life's alive subject,
// writes the life's key and makes it the one new leases name.
func (w *Worker) beginLife(ctx context.Context) (*life, error) {
	key := randomHex(8)
	// Answered through the reply guard like every request: a probe's
	// reply subject is the prober's inbox, never a subject of the fleet's.
	guard := &reply.Guard{NC: w.nc, Log: w.log, Service: "liveness"}
	sub, err := w.nc.Subscribe(events.AlivePrefix+key, guard.MsgHandler("alive", func(r *reply.Request) {
		_ = guard.Send(r.To, &nats.Msg{})
	}))
	if err != nil {
		return nil, fmt.Errorf("lanes: answer on %s: %w", events.AlivePrefix+key, err)
	}
	bctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	if err := w.nc.FlushWithContext(bctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("lanes: answer on %s: %w", events.AlivePrefix+key, err)
	}
	started := w.now().UnixMilli()
	base := time.Now()
	pulse, err := w.cfg.Liveness.Begin(bctx, key, kvstore.Life{Worker: w.cfg.ID, Started: started})
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("lanes: %w", err)
	}
	lctx, end := context.WithCancelCause(context.Background())
	lf := &life{key: key, started: started, ctx: lctx, end: end, pulse: pulse, sub: sub, base: base}
	lf.confirmed(0, w.cfg.Liveness.TTL())
	w.life.Store(lf)
	return lf, nil
}

// beat keeps the worker's life until ctx ends. A beat refused (the life
// is over) or a wake-up a TTL late ends the life, which stops the owners
// of its leases, and begins a new one.
func (w *Worker) beat(ctx context.Context, lf *life) {
	every := w.cfg.LivenessEvery
	ttl := w.cfg.Liveness.TTL()
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		gap := now.Sub(last)
		last = now
		var err error
		if gap >= ttl {
			err = fmt.Errorf("%w: this worker did not beat for %s (frozen or starved)", kvstore.ErrDeclaredDead, gap.Round(time.Millisecond))
		} else {
			bctx, cancel := context.WithTimeout(ctx, max(every, ttl/2))
			sent := time.Since(lf.base)
			err = lf.pulse.Beat(bctx)
			cancel()
			if err == nil {
				lf.confirmed(sent, ttl)
				last = time.Now()
			}
		}
		switch {
		case err == nil:
			continue
		case !errors.Is(err, kvstore.ErrDeclaredDead):
			if ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("beat")
			}
			continue
		}
		w.log.Error().Err(err).Msg("this worker was declared dead: stopping its turns, its lanes go to other workers")
		// Leases taken from now on name no life until the next begins:
		// none is bound to the life that just ended.
		w.life.Store(nil)
		lf.end(fmt.Errorf("%w: %w", kvstore.ErrLeaseLost, err))
		_ = lf.sub.Unsubscribe()
		for ctx.Err() == nil {
			nl, err := w.beginLife(ctx)
			if err == nil {
				lf = nl
				last = time.Now()
				break
			}
			w.log.Warn().Err(err).Msg("begin a new life")
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}
}

// onLife takes in one change of a life from the watch.
func (w *Worker) onLife(ev kvstore.LifeEvent) {
	if cur := w.life.Load(); cur != nil && ev.Key == cur.key {
		return
	}
	a := w.alive
	a.mu.Lock()
	if !ev.Ended {
		a.peers[ev.Key] = &peer{worker: ev.Life.Worker, left: ev.Life.Left, rev: ev.Rev, seen: time.Now()}
		a.mu.Unlock()
		return
	}
	p := a.peers[ev.Key]
	delete(a.peers, ev.Key)
	a.mu.Unlock()
	worker := ""
	if p != nil {
		if p.left {
			return // a worker that stopped: it handed its lanes over
		}
		worker = p.worker
	}
	w.goTakeOver(ev.Key, worker)
}

// probeLate probes the lives whose beat is late by half a period, and
// declares dead those whose connection is gone.
func (w *Worker) probeLate(ctx context.Context) {
	every := w.cfg.LivenessEvery
	everyTick(ctx, max(every/4, 10*time.Millisecond), func() bool {
		a := w.alive
		now := time.Now()
		reconnects := w.nc.Stats().Reconnects
		a.mu.Lock()
		if reconnects != a.reconnects {
			// This worker's connection was back only now: so may the
			// others' be soon. Give them a few beats before probing.
			a.reconnects = reconnects
			for _, p := range a.peers {
				p.seen = now.Add(4 * every)
			}
		}
		for key, p := range a.peers {
			if p.probing || p.left || now.Sub(p.seen) < every+every/2 {
				continue
			}
			p.probing = true
			a.wg.Go(func() { w.probe(ctx, key, p) })
		}
		for key, at := range a.ended {
			if now.Sub(at) > 2*time.Minute {
				delete(a.ended, key)
			}
		}
		a.mu.Unlock()
		return true
	})
}

// probe asks a late life's worker whether it is connected; no responder
// declares it dead (at the revision last seen: a beat since wins).
func (w *Worker) probe(ctx context.Context, key string, p *peer) {
	a := w.alive
	pctx, cancel := context.WithTimeout(ctx, max(w.cfg.LivenessEvery, 100*time.Millisecond))
	_, err := w.nc.RequestWithContext(pctx, events.AlivePrefix+key, nil)
	cancel()
	a.mu.Lock()
	rev := p.rev
	p.probing = false
	if !errors.Is(err, nats.ErrNoResponders) {
		// Connected (or the server could not tell): it lives on until its
		// life lapses. Probe again a period on.
		if err == nil || ctx.Err() == nil {
			p.seen = time.Now().Add(-w.cfg.LivenessEvery / 2)
		}
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	ok, err := w.cfg.Liveness.Declare(dctx, key, rev)
	if err != nil {
		w.log.Warn().Err(err).Str("life", key).Msg("declare a worker dead")
		return
	}
	if ok {
		w.log.Warn().Str("dead", p.worker).Str("life", key).Msg("a worker's connection is gone: declared it dead, taking its lanes over")
		a.mu.Lock()
		delete(a.peers, key)
		a.mu.Unlock()
		w.goTakeOver(key, p.worker)
	}
}

// goTakeOver takes over, once, the lanes of a life that ended.
func (w *Worker) goTakeOver(key, worker string) {
	a := w.alive
	a.mu.Lock()
	_, done := a.ended[key]
	if !done {
		a.ended[key] = time.Now()
	}
	a.mu.Unlock()
	if done || w.shuttingDown.Load() {
		return
	}
	a.wg.Go(func() { w.takeOver(key, worker) })
}

// takeOver takes over the lanes whose leases name the ended life key, as
// many as this worker has slots for, then sweeps at once the lanes with
// messages nobody holds.
func (w *Worker) takeOver(key, worker string) {
	ctx, cancel := context.WithTimeout(context.Background(), w.sweepPassTime())
	defer cancel()
	leases, err := w.lanes.LeasesOf(ctx, key)
	if err != nil {
		w.log.Warn().Err(err).Str("life", key).Msg("find a dead worker's lanes")
	}
	taken := 0
	for _, h := range leases {
		if w.shuttingDown.Load() || ctx.Err() != nil {
			return
		}
		lane, laneKey, err := events.LaneOf(events.InboundPrefix + h.Token)
		if err != nil || lane != h.Token {
			continue
		}
		charged, ok := w.sched.Take(h.Token, 0, w.now())
		if !ok {
			break // no slot: another worker takes the rest, or their deliveries after AckWait
		}
		info, lf := w.leaseInfo(0)
		lease, err := w.lanes.TakeOver(ctx, h, info)
		if err != nil {
			w.sched.Put(h.Token, charged, w.now())
			if !errors.Is(err, kvstore.ErrHeld) {
				w.log.Warn().Err(err).Str("lane", h.Token).Msg("take over a dead worker's lane")
			}
			continue
		}
		taken++
		w.stats.TakenOver.Add(1)
		w.runTaken(h.Token, laneKey, events.InboundPrefix+h.Token, lease, lf, charged)
	}
	if len(leases) > 0 {
		w.log.Info().Str("dead", worker).Str("life", key).Int("lanes", taken).Int("found", len(leases)).Msg("took over a dead worker's lanes")
	}
	w.sweepOnce(ctx, 0)
}
