package lanes

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/retention"
)

// sweep is the safety net under lease-and-drain: every so often it lists the
// lanes that have messages, and takes over any lane whose oldest unprocessed
// message has waited longer than AckWait with nobody holding its lease. A
// lane only gets there if every dispatch delivery of it was lost (for
// example a trigger whose message vanished in a failover); the sweep makes
// sure such a lane is still drained. A lane with only processed messages
// left whose newest turn still owes final events (an owner that could not
// store them kept that turn's message) is taken over too, at once, so an
// owner publishes them; other processed leftovers are deleted. It first
// lowers the inbound stream's per-lane cap to the configured one if a lane
// held more when it was set (Streams.TightenLaneCap). With a session TTL it
// also runs the retention pass, every retention.PassEvery (expire.go).
func (w *Worker) sweep(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if (retention.Policy{SessionTTL: w.cfg.SessionTTL}).Enabled() {
		wg.Go(func() { w.retain(ctx) })
	}
	everyTick(ctx, w.cfg.SweepEvery, func() bool {
		if w.shuttingDown.Load() {
			return false
		}
		w.sweepOnce(ctx, w.streams.cfg.AckWait)
		return true
	})
}

// sweepPassTime is how long one part of a sweep (the stranded-lane pass,
// a liveness pass) may take: the sweep's period, but never less than
// minSweepPass.
func (w *Worker) sweepPassTime() time.Duration {
	return max(w.cfg.SweepEvery, minSweepPass)
}

// minSweepPass is the least time a sweep pass gets. A pass is a dozen
// store round trips per lane; bounded by a short period alone (100 ms in
// tests, or an operator's), a pass on a loaded machine ran out every time
// and never forgot a session (TestSessionTTLSweep on a busy 2-core CI
// machine, and with taskset to one core). A longer pass only delays the
// next tick.
const minSweepPass = 10 * time.Second

// sweepOnce is one pass of the sweep: it takes the lanes whose oldest
// unprocessed message waited at least age with nobody holding the lane
// (AckWait; 0 right after a worker died, whose deliveries in hand would
// otherwise wait out AckWait).
func (w *Worker) sweepOnce(ctx context.Context, age time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, w.sweepPassTime())
	defer cancel()
	if err := w.streams.TightenLaneCap(ctx, w.js); err != nil {
		w.log.Warn().Err(err).Msg("sweep: lower the per-lane cap to the configured one")
	}
	info, err := w.streams.Inbound.Info(ctx, jetstream.WithSubjectFilter(events.InboundPrefix+"*"))
	if err != nil {
		w.log.Debug().Err(err).Msg("sweep: list lanes")
		return
	}
	for subj := range info.State.Subjects {
		if ctx.Err() != nil || w.shuttingDown.Load() {
			return
		}
		token := strings.TrimPrefix(subj, events.InboundPrefix)
		key, err := events.TokenKey(token)
		if err != nil {
			continue // dispatch dead-letters undecodable lanes
		}
		if _, held, err := w.lanes.Holder(ctx, token); err != nil || held {
			continue
		}
		cur, err := w.lanes.Cursor(ctx, token)
		if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
			continue
		}
		next, err := w.streams.Inbound.GetMsg(ctx, cur.Seq+1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			if cur.Seq > 0 && w.owesFinals(ctx, token, cur.Seq) {
				if !w.sweepLane(ctx, token, key, subj, zerolog.WarnLevel, "sweep: publishing the final events a committed turn owes") {
					return
				}
				continue
			}
			w.deleteLeftovers(ctx, subj, cur.Seq)
			continue
		}
		if err != nil || w.now().Sub(next.Time) < age || w.cfg.paused(key) {
			continue
		}
		if !w.sweepLane(ctx, token, key, subj, zerolog.WarnLevel, "sweep: draining a lane no delivery woke") {
			return
		}
	}
}

// maxLeftovers bounds the processed messages one sweep deletes per lane.
const maxLeftovers = 256

// deleteLeftovers deletes a lane's processed messages (up to the cursor)
// one by one: a purge would drop the dispatch consumer's redelivery queue
// (see owner.deleteProcessed).
func (w *Worker) deleteLeftovers(ctx context.Context, subj string, cursor uint64) {
	for seq, n := uint64(1), 0; n < maxLeftovers && ctx.Err() == nil; n++ {
		raw, err := w.streams.Inbound.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if err != nil || raw.Sequence > cursor {
			return
		}
		w.deleteInbound(ctx, raw.Sequence)
		seq = raw.Sequence + 1
	}
}

// sweepLane takes a lane over (no trigger) and runs its owner, logging why
// at level. It reports false when the worker has no free slot: the next
// sweep tries again.
func (w *Worker) sweepLane(ctx context.Context, token, key, subj string, level zerolog.Level, why string) bool {
	// A swept lane's messages are read by its owner: it is charged no
	// trigger's payload, only what the lane's next message needs if an
	// owner here let it go over the byte budget.
	charged, ok := w.sched.Take(token, 0, w.now())
	if !ok {
		return false
	}
	info, lf := w.leaseInfo(0)
	lease, err := w.lanes.Acquire(ctx, token, info)
	if err != nil {
		w.sched.Put(token, charged, w.now())
		return true
	}
	w.stats.Swept.Add(1)
	w.log.WithLevel(level).Str("lane", token).Msg(why)
	w.runTaken(token, key, subj, lease, lf, charged)
	return true
}

// runTaken runs the owner of a lane taken without a trigger delivery (by
// the sweep, or from a worker declared dead) in a slot charged charged
// bytes, and gives the slot back after.
func (w *Worker) runTaken(token, key, subj string, lease *kvstore.Lease, lf *life, charged int64) {
	w.wg.Add(1)
	go func() {
		o := w.newOwner(token, key, subj, ownerLease{Lease: lease, life: lf}, charged)
		defer func() { w.sched.Put(token, o.slot.charged, w.now()); w.wg.Done() }()
		o.markHeld(true)
		defer o.markHeld(false)
		o.run()
	}()
}

// owesFinals reports whether the lane's record of seq ends a run whose final
// event is not stored (read errors say no: the next sweep looks again).
func (w *Worker) owesFinals(ctx context.Context, token string, seq uint64) bool {
	rec, ok, err := w.lanes.Record(ctx, token, seq)
	if err != nil || !ok || len(rec.Final) == 0 {
		return false
	}
	ev, err := events.DecodeEvent(events.ContentMsgpack, rec.Final)
	if err != nil || ev.Data.Result == nil {
		return false
	}
	runs := []string{rec.RunID}
	for _, c := range ev.Data.Result.Meta.Consumed {
		runs = append(runs, c.RunID)
	}
	for _, run := range runs {
		raw, err := w.streams.Events.GetLastMsgForSubject(ctx, events.EventPrefix+token+"."+run)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return true
		}
		if err != nil {
			return false
		}
		last, err := events.DecodeEvent(raw.Header.Get(events.HeaderContentType), raw.Data)
		if err == nil && !last.Terminal() {
			return true
		}
	}
	return false
}
