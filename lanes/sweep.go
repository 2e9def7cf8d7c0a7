package lanes

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// sweep is the safety net under lease-and-drain: every so often it lists the
// lanes that have messages, and takes over any lane whose oldest unprocessed
// message has waited longer than AckWait with nobody holding its lease. A
// lane only gets there if every dispatch delivery of it was lost (for
// example a trigger whose message vanished in a failover); the sweep makes
// sure such a lane is still drained. Lanes with only processed leftovers get
// them purged.
func (w *Worker) sweep(ctx context.Context) {
	every := w.cfg.SweepEvery
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w.stopping.Load() {
			return
		}
		w.sweepOnce(ctx)
	}
}

func (w *Worker) sweepOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.SweepEvery)
	defer cancel()
	info, err := w.streams.Inbound.Info(ctx, jetstream.WithSubjectFilter(events.InboundPrefix+"*"))
	if err != nil {
		w.log.Debug().Err(err).Msg("sweep: list lanes")
		return
	}
	age := w.streams.cfg.AckWait
	for subj := range info.State.Subjects {
		if ctx.Err() != nil || w.stopping.Load() {
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
			// Only processed messages left: purge them.
			_ = w.streams.Inbound.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(cur.Seq+1))
			continue
		}
		if err != nil || time.Since(next.Time) < age {
			continue
		}
		select {
		case w.slots <- struct{}{}:
		default:
			return // busy: the next sweep tries again
		}
		lease, err := w.lanes.Acquire(ctx, token, kvstore.LeaseInfo{Worker: w.cfg.ID, Acquired: time.Now().UnixMilli()})
		if err != nil {
			<-w.slots
			continue
		}
		w.stats.Swept.Add(1)
		w.log.Warn().Str("lane", token).Uint64("seq", next.Sequence).Dur("waited", time.Since(next.Time)).Msg("sweep: draining a lane no delivery woke")
		w.wg.Add(1)
		go func() {
			defer func() { <-w.slots; w.wg.Done() }()
			o := &owner{w: w, token: token, key: key, subject: subj, lease: lease, log: w.log.With().Str("lane", token).Logger()}
			o.run()
		}()
	}
}
