package lanes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/retention"
)

// forgotten is what forgetIdle did with a lane.
type forgotten struct {
	forgot bool
	keys   int       // keys removed
	busy   bool      // idle, but held or a message waiting: left as it was
	later  time.Time // it was kept for a write after the cutoff, at this time
}

// forgetIdle forgets the lane if it is idle: its last write before cutoff,
// nobody holding it, no message waiting.
func (w *Worker) forgetIdle(ctx context.Context, token string, cutoff time.Time) (forgotten, error) {
	// Checked first: the token goes into a subject filter, and one read
	// back from the retry list may hold a wildcard.
	key, err := events.TokenKey(token)
	if err != nil {
		return forgotten{}, nil // not a lane of ours
	}
	d, err := w.lanes.Data(ctx, token)
	if err != nil {
		return forgotten{}, err
	}
	if retention.Decide(retention.Lane{LastWrite: d.LastWrite}, cutoff) == retention.Keep {
		return forgotten{later: d.LastWrite}, nil
	}
	if w.testHookIdle != nil {
		w.testHookIdle(token)
	}
	lease, err := w.lanes.Acquire(ctx, token, kvstore.LeaseInfo{Worker: w.cfg.ID, Acquired: w.now().UnixMilli()})
	if errors.Is(err, kvstore.ErrHeld) {
		return forgotten{busy: true}, nil
	}
	if err != nil {
		return forgotten{}, err
	}
	// The lane is ours now: no owner can start on it, and no write of an
	// earlier one can land. A turn that committed between the read above
	// and the acquire wrote a record after the cutoff; a message that
	// waits is a session about to speak.
	subj := events.InboundPrefix + token
	d, lane, err := w.idleState(ctx, lease, token, d)
	idle := err == nil && retention.Decide(lane, cutoff) == retention.Forget
	var keys int
	if idle {
		keys, err = lease.Forget(ctx, d.Keys)
		if err == nil && keys == 0 && len(d.Keys) > 0 {
			// Another forget removed what d found, after d was read and
			// before the lease (Untouched cannot see a purge): not this
			// one's to count or to take off the index.
			idle, lane.LastWrite = false, time.Time{}
		}
		if idle && err == nil && w.cfg.Index != nil {
			// Before the lease goes: a session that speaks again once it
			// is released is listed anew, not removed after its entry.
			w.cfg.Index.Forgotten(ctx, key)
		}
	}
	if rerr := lease.Release(context.WithoutCancel(ctx)); rerr != nil {
		w.log.Warn().Err(rerr).Str("lane", token).Msg("retention: release lease")
	}
	if err != nil {
		return forgotten{}, fmt.Errorf("lanes: forget %s: %w", token, err)
	}
	// A message stored while the lane was held was acked by the worker it
	// was delivered to, for the holder to drain: take the lane over now.
	if _, gerr := w.streams.Inbound.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj)); gerr == nil {
		w.sweepLane(ctx, token, key, subj, zerolog.WarnLevel, "retention: a message arrived while the session was checked")
	}
	switch {
	case idle:
		return forgotten{forgot: true, keys: keys}, nil
	case lane.Pending:
		return forgotten{busy: true}, nil
	case lane.LastWrite.IsZero():
		return forgotten{}, nil // forgotten meanwhile
	}
	return forgotten{later: lane.LastWrite}, nil
}

// idleState reads, holding the lane's lease, what it keeps and whether an
// unprocessed message waits for it: what it kept when read before the lease
// (before) while nothing was written to it since, else read again.
// Processed messages left behind are deleted on the way, since the cursor
// that marks them processed goes with the transcript.
func (w *Worker) idleState(ctx context.Context, lease *kvstore.Lease, token string, before kvstore.LaneData) (kvstore.LaneData, retention.Lane, error) {
	d, subj := before, events.InboundPrefix+token
	same, err := lease.Untouched(ctx, before.Seen)
	if err == nil && !same {
		d, err = w.lanes.Data(ctx, token)
	}
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
		if w.cfg.Index != nil {
			// Listed by a message that never got a turn (Index.Queued).
			w.cfg.Index.Forgotten(ctx, key)
		}
		return 0, nil
	}
	// Every write is before a cutoff after it: only a holder or a waiting
	// message keeps the session.
	out, err := w.forgetIdle(ctx, token, d.LastWrite.Add(time.Hour*24*365*100))
	switch {
	case err != nil:
		return 0, err
	case out.busy:
		return 0, ErrBusy
	case !out.forgot:
		return 0, nil // gone meanwhile
	}
	return out.keys, nil
}
