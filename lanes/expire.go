package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/retention"
)

// ExpireStats counts what one retention pass did.
type ExpireStats struct {
	Scanned int // stored messages of the lanes bucket read
	Expired int // sessions forgotten
	Keys    int // transcript records and settings removed
	Skipped int // idle sessions left as they were: held, or a message waiting
}

// maxExpirePerPass bounds the sessions one pass of the sweep forgets; the
// next pass goes on where it stopped.
const maxExpirePerPass = 10_000

// expire runs the retention pass of the sweep (Config.SessionTTL), within
// the sweep's period.
func (w *Worker) expire(ctx context.Context) {
	p := retention.Policy{SessionTTL: w.cfg.SessionTTL}
	if !p.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, w.sweepPassTime())
	defer cancel()
	st, err := w.ExpireIdle(ctx, p.Cutoff(w.now()), maxExpirePerPass)
	if err != nil && ctx.Err() == nil {
		w.log.Warn().Err(err).Msg("retention pass")
	}
	if st.Expired > 0 || st.Skipped > 0 {
		w.log.Info().Int("expired", st.Expired).Int("keys", st.Keys).Int("skipped", st.Skipped).Msg("retention: idle sessions forgotten")
	}
}

// ExpireIdle runs one retention pass (see package retention): it walks the
// lanes bucket from the stored scan position up to cutoff and forgets every
// session whose last write is older than cutoff, stopping after the batch
// in which it reached limit, then stores the position it reached. It
// rests between batches as long as the last one took (restExpire), and
// stops at a batch's end when ctx ends while it rests. A
// session is forgotten under its lease, so never while someone runs it,
// and never while a message waits for it. An error leaves the position at the session it happened on, so
// the next pass tries that one again; passes of several workers at once
// are safe (each session is forgotten under its lease) and the position
// only moves forward.
func (w *Worker) ExpireIdle(ctx context.Context, cutoff time.Time, limit int) (ExpireStats, error) {
	var st ExpireStats
	pos, rev, err := w.lanes.RetentionPos(ctx)
	if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
		return st, err
	}
	seq, scanned := pos, false
	var (
		passErr   error
		ahead     []kvstore.Stored // read from the bucket, not looked at yet
		batchTook time.Duration    // how long the last batch took
	)
	for !scanned && st.Expired < limit && passErr == nil {
		if batchTook > 0 && !restExpire(ctx, batchTook) {
			break // the pass's time is up: the next goes on from here
		}
		began := time.Now()
		// A batch of lanes with data written before the cutoff, each
		// once, in stream order; then each is looked at concurrently.
		var batch []kvstore.Stored
		seen := map[string]bool{}
		next := seq
		for len(batch) < expireBatch {
			if len(ahead) == 0 {
				ahead, err = w.lanes.ScanBatch(ctx, next, expireScan)
				if err != nil {
					passErr = err
					break
				}
				if len(ahead) == 0 {
					scanned = true // the end of the bucket
					break
				}
			}
			m := ahead[0]
			ahead = ahead[1:]
			if !m.Time.Before(cutoff) {
				scanned = true // every lane written before the cutoff
				break
			}
			st.Scanned++
			next = m.Seq + 1
			if m.Data && !seen[m.Token] {
				seen[m.Token] = true
				batch = append(batch, m)
			}
		}
		type result struct {
			forgot bool
			keys   int
			err    error
		}
		results := make([]result, len(batch))
		var wg sync.WaitGroup
		sem := make(chan struct{}, expireParallel)
		for i, m := range batch {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				r := &results[i]
				r.forgot, r.keys, r.err = w.forgetIdle(ctx, m.Token, cutoff)
			})
		}
		wg.Wait()
		// The position passes the batch unless a lane failed: then it
		// stays at the first that did, which the next pass retries.
		moved := next
		for i, r := range results {
			switch {
			case r.err != nil:
				if batch[i].Seq < moved {
					moved = batch[i].Seq
				}
				passErr = errors.Join(passErr, r.err)
			case r.forgot:
				st.Expired++
				st.Keys += r.keys
			case r.keys < 0:
				st.Skipped++
			}
		}
		seq = moved
		batchTook = max(time.Since(began), time.Millisecond)
	}
	if seq != pos {
		if err := w.lanes.SetRetentionPos(context.WithoutCancel(ctx), seq, rev); err != nil && !errors.Is(err, kvstore.ErrPosMoved) {
			passErr = errors.Join(passErr, err)
		}
	}
	return st, passErr
}

// Retention pass sizes: lanes read ahead, looked at at once, and the
// bucket's messages read in one request.
const (
	expireBatch    = 256
	expireParallel = 4
	expireScan     = 1024
)

// restExpire waits, between two batches of a retention pass, as long as
// the last batch took, so that the pass works at most half the time and
// the lanes' own writes meet at most expireParallel of its requests at
// once: a pass that forgot its sessions all at once (16 at a time, back to
// back) slowed the fleet's turns while it ran. It reports false when ctx
// (the pass's time) ends first.
func restExpire(ctx context.Context, took time.Duration) bool {
	t := time.NewTimer(took)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// forgetIdle forgets the lane if it is idle: its last write before cutoff,
// nobody holding it, no message waiting. keys is how many keys it removed,
// or -1 when an idle lane was left because it was held or had a message
// waiting.
func (w *Worker) forgetIdle(ctx context.Context, token string, cutoff time.Time) (forgot bool, keys int, err error) {
	d, err := w.lanes.Data(ctx, token)
	if err != nil {
		return false, 0, err
	}
	if retention.Decide(retention.Lane{LastWrite: d.LastWrite}, cutoff) == retention.Keep {
		return false, 0, nil
	}
	key, err := events.TokenKey(token)
	if err != nil {
		return false, 0, nil // not a lane of ours
	}
	lease, err := w.lanes.Acquire(ctx, token, kvstore.LeaseInfo{Worker: w.cfg.ID, Acquired: w.now().UnixMilli()})
	if errors.Is(err, kvstore.ErrHeld) {
		return false, -1, nil
	}
	if err != nil {
		return false, 0, err
	}
	// The lane is ours now: no owner can start on it, and no write of an
	// earlier one can land. A turn that committed between the read above
	// and the acquire wrote a record after the cutoff; a message that
	// waits is a session about to speak.
	subj := events.InboundPrefix + token
	d, lane, err := w.idleState(ctx, token, subj)
	idle := err == nil && retention.Decide(lane, cutoff) == retention.Forget
	if idle {
		keys, err = lease.Forget(ctx, d.Keys)
	}
	if rerr := lease.Release(context.WithoutCancel(ctx)); rerr != nil {
		w.log.Warn().Err(rerr).Str("lane", token).Msg("retention: release lease")
	}
	if err != nil {
		return false, 0, fmt.Errorf("lanes: forget %s: %w", token, err)
	}
	// A message stored while the lane was held was acked by the worker it
	// was delivered to, for the holder to drain: take the lane over now.
	if _, gerr := w.streams.Inbound.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj)); gerr == nil {
		w.sweepLane(ctx, token, key, subj, zerolog.WarnLevel, "retention: a message arrived while the session was checked")
	}
	if !idle {
		return false, -1, nil
	}
	if w.cfg.Index != nil {
		w.cfg.Index.Forgotten(ctx, key)
	}
	return true, keys, nil
}

// idleState reads, holding the lane's lease, what it keeps and whether an
// unprocessed message waits for it. Processed messages left behind are
// deleted on the way, since the cursor that marks them processed goes with
// the transcript.
func (w *Worker) idleState(ctx context.Context, token, subj string) (kvstore.LaneData, retention.Lane, error) {
	d, err := w.lanes.Data(ctx, token)
	lane := retention.Lane{LastWrite: d.LastWrite}
	if err != nil {
		return d, lane, err
	}
	for n := 0; ; n++ {
		raw, err := w.streams.Inbound.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return d, lane, nil
		}
		if err != nil {
			return d, lane, err
		}
		if raw.Sequence > d.Cursor || n >= maxLeftovers {
			lane.Pending = true
			return d, lane, nil
		}
		if err := w.streams.Inbound.DeleteMsg(ctx, raw.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return d, lane, err
		}
	}
}

// ErrBusy means a session cannot be forgotten now: a worker holds its
// lane (a turn runs) or a message waits for it.
var ErrBusy = errors.New("lanes: the session is running or has a message waiting")

// Forget forgets one session at an operator's request: its transcript,
// settings and lane records go, under its lease, as the retention pass
// forgets an idle session whatever its age. It returns how many keys it
// removed (0 for a session with nothing stored), or ErrBusy.
func (w *Worker) Forget(ctx context.Context, key string) (int, error) {
	token, err := events.KeyToken(key)
	if err != nil {
		return 0, fmt.Errorf("lanes: forget: %w", err)
	}
	d, err := w.lanes.Data(ctx, token)
	if err != nil {
		return 0, err
	}
	if d.LastWrite.IsZero() {
		// Nothing stored yet: a first turn may run, or its message wait.
		_, held, err := w.lanes.Holder(ctx, token)
		if err != nil {
			return 0, err
		}
		_, gerr := w.streams.Inbound.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(events.InboundPrefix+token))
		switch {
		case held || gerr == nil:
			return 0, ErrBusy
		case !errors.Is(gerr, jetstream.ErrMsgNotFound):
			return 0, gerr
		}
		return 0, nil
	}
	// Every write is before a cutoff after it: only a holder or a waiting
	// message keeps the session.
	forgot, keys, err := w.forgetIdle(ctx, token, d.LastWrite.Add(time.Hour*24*365*100))
	switch {
	case err != nil:
		return 0, err
	case !forgot && keys < 0:
		return 0, ErrBusy
	case !forgot:
		return 0, nil // gone meanwhile
	}
	return keys, nil
}
