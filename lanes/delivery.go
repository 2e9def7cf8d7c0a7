package lanes

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// onDelivery runs serially for the consume context, so it only takes a slot
// and hands the delivery off. With every slot busy it does not sit on the
// delivery until AckWait (its lane would wait that long): see busyDelivery.
func (w *Worker) onDelivery(msg jetstream.Msg) {
	if w.shuttingDown.Load() {
		w.settleDelivery(msg, settleHandBack)
		return
	}
	follower := w.heldHere(msg)
	var (
		charged int64 // payload bytes charged to the slot
		got     bool
	)
	token, _ := strings.CutPrefix(msg.Subject(), events.InboundPrefix) // checked by the lane's owner
	if !follower {
		w.queued(msg, token)
		charged, got = w.sched.Take(token, len(msg.Data()), w.now())
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if follower {
			w.settleDelivery(msg, settleFollower) // its lane's owner here drains it
			return
		}
		if !got {
			if charged, got = w.busyDelivery(msg); !got {
				return
			}
		}
		w.sched.Put(token, w.handleDelivery(msg, charged), w.now())
	}()
}

// queued tells the index of a message's first delivery, so that a new
// session is listed while its first message waits for a slot or a lease
// (Index.Queued). A follower's lane is owned here, so its session is
// listed already; a redelivery was told of at its first.
func (w *Worker) queued(msg jetstream.Msg, token string) {
	if w.cfg.Index == nil {
		return
	}
	md, err := msg.Metadata()
	if err != nil || md.NumDelivered != 1 {
		return
	}
	key, err := events.TokenKey(token)
	if err != nil {
		return // not a lane of ours: its owner dead-letters it
	}
	w.cfg.Index.Queued(key, strconv.FormatUint(md.Sequence.Stream, 10))
}

// busyNakDelay is how soon a delivery a busy worker could not take comes
// back (to any worker) the first time; each time it comes back and finds
// no room again it stays away twice as long, up to busyNakMax (see
// busyDelay).
const busyNakDelay = 250 * time.Millisecond

// busyNakMax bounds how long a delivery a busy worker could not take stays
// away.
const busyNakMax = 4 * time.Second

// busyDelay is how soon a delivery that found no room here comes back:
// busyNakDelay, doubled for each earlier delivery of it, up to busyNakMax
// and half the AckWait. A flood of lanes that the slots and the line
// cannot hold thus comes back a few times a second rather than four times
// a second each: every such return is a delivery, a hand-back and, ahead of
// it in the dispatch consumer, a new session's message kept waiting (the
// server sends redeliveries before new messages).
func (w *Worker) busyDelay(msg jetstream.Msg) time.Duration {
	md, err := msg.Metadata()
	if err != nil || md.NumDelivered <= 1 {
		return busyNakDelay
	}
	return min(busyNakDelay<<min(md.NumDelivered-1, 8), busyNakMax, max(w.streams.cfg.AckWait/2, busyNakDelay))
}

// busyDelivery deals with a delivery that arrived while every slot was
// busy, or the byte budget could not take its payload. When the line for
// slots is full it is handed back with a growing delay (busyNakDelay) at
// once, without asking who holds its lane (it comes back until the lane's
// owner has drained it, or a slot frees). Otherwise a message of a lane
// someone owns is acked (the owner drains it); any other waits in line for
// a slot (fair scheduling: see waitForSlot) or, without fairness, is handed
// back, so a worker with room takes the lane. It reports whether the
// delivery got a slot, and the payload bytes charged to the slot.
func (w *Worker) busyDelivery(msg jetstream.Msg) (int64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := msg.Metadata()
	if err != nil {
		w.settleDelivery(msg, settleBusy)
		return 0, false
	}
	token, _, err := events.LaneOf(msg.Subject())
	if err != nil {
		w.settleDelivery(msg, settleBusy) // dead-lettered by a worker with room
		return 0, false
	}
	if w.fair() && !w.sched.Admits(token, len(msg.Data()), w.now()) {
		// The line is full: no need to ask who holds the lane.
		w.settleDelivery(msg, settleBusy)
		return 0, false
	}
	if !w.fair() || !w.sched.Known(token, w.now()) {
		// A lane waiting here was not held a moment ago: no need to ask.
		// (Without fairness nothing waits: a lane an owner here let go
		// over the byte budget is known, and handed back.)
		h, held, err := w.lanes.Holder(ctx, token)
		if err == nil && held && !holdsAsTrigger(h, md) {
			w.settleDelivery(msg, settleFollower)
			return 0, false
		}
		if err != nil || held || !w.fair() {
			w.settleDelivery(msg, settleBusy)
			return 0, false
		}
	}
	return w.waitForSlot(msg, token)
}

// holdsAsTrigger reports whether a delivery is the one the lane's holder
// keeps un-acked as its trigger: coming back means the holder stopped
// keeping it alive (it died, is paused, or lost its connection), so the
// lane needs a new owner once the lease lapses. A lease without a trigger
// (taken by the sweep, or written by an older worker) cannot tell: any
// redelivery counts; but a lease taken over from a worker declared dead
// (LeaseInfo.From) is kept alive by its new owner, which drains the dead
// worker's messages: their deliveries coming back are followers.
func holdsAsTrigger(h kvstore.LeaseInfo, md *jetstream.MsgMetadata) bool {
	if h.Trigger == 0 {
		return h.From == "" && md.NumDelivered > 1
	}
	return h.Trigger == md.Sequence.Stream
}

// deliveryEnd is what becomes of a dispatch delivery that does not become
// a lane's trigger; settleDelivery carries it out.
type deliveryEnd uint8

const (
	// settleFollower: the lane has an owner (or a delivery waiting here)
	// that drains the message: ack it.
	settleFollower deliveryEnd = iota
	// settleBusy: no slot here: hand it back after busyDelay, to any
	// worker.
	settleBusy
	// settleHandBack: hand it back at once (the worker shuts down, or it has
	// waited here long enough; it keeps its place for its redelivery).
	settleHandBack
	// settleRetry: the lane could not be taken now (no metadata, its
	// lease still held as this very trigger, the lease store failed):
	// try again in a second.
	settleRetry
	// settleDead: it was dead-lettered: ack it and delete its message.
	settleDead
	// settleNotDead: its dead letter could not be stored: the message
	// stays, and its delivery comes back after deadRetryDelay.
	settleNotDead
)

// settleDelivery is the one place that acks or naks a delivery the worker
// does not keep as a lane's trigger (owner.settleTrigger settles triggers).
func (w *Worker) settleDelivery(msg jetstream.Msg, end deliveryEnd) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch end {
	case settleFollower:
		w.stats.FollowerAcks.Add(1)
		w.ack(ctx, msg)
	case settleBusy:
		w.nak(msg, w.busyDelay(msg))
	case settleHandBack:
		w.nak(msg, 0)
	case settleRetry:
		w.nak(msg, time.Second)
	case settleDead:
		w.ack(ctx, msg)
		if md, err := msg.Metadata(); err == nil {
			w.deleteInbound(ctx, md.Sequence.Stream)
		}
	case settleNotDead:
		w.nak(msg, w.cfg.deadRetry)
	}
}

func (w *Worker) nak(msg jetstream.Msg, delay time.Duration) {
	if msg == nil {
		return // a lane taken by the sweeper has no trigger delivery
	}
	w.stats.Naks.Add(1)
	var err error
	if delay > 0 {
		err = msg.NakWithDelay(delay)
	} else {
		err = msg.Nak()
	}
	if err != nil {
		w.log.Debug().Err(err).Msg("nak")
	}
}

func (w *Worker) ack(ctx context.Context, msg jetstream.Msg) {
	if msg == nil {
		return
	}
	if err := msg.DoubleAck(ctx); err != nil {
		w.log.Debug().Err(err).Msg("ack")
	}
}

// handleDelivery takes the lane of a delivery that got a slot and drains it
// (or settles the delivery when the lane is owned). The slot is charged
// charged bytes of the byte budget; it returns what the slot is charged
// when the lane is let go (more when its owner ran larger messages).
func (w *Worker) handleDelivery(msg jetstream.Msg, charged int64) int64 {
	// Taking the lane is in takeLane, not inlined here: this frame stays
	// on the turn's stack while its model answers (see docs/scaling.md,
	// "What a turn in flight holds").
	o, leave := w.takeLane(msg, charged)
	if o == nil {
		return charged
	}
	defer leave()
	defer o.markHeld(false)
	o.run()
	return o.slot.charged
}

// takeLane takes the lease of a delivery's lane and returns the lane's new
// owner, held, with the function that gives back its place in the set-up
// gate; a nil owner when the delivery was settled instead (the worker
// shutting down, a message with no lane, a lease held elsewhere or that
// could not be taken).
//
//go:noinline
func (w *Worker) takeLane(msg jetstream.Msg, charged int64) (*owner, func()) {
	if w.shuttingDown.Load() {
		w.settleDelivery(msg, settleHandBack) // it got a slot as the worker began to shut down
		return nil, nil
	}
	leave, ok := w.gate.enter(w.shutdown)
	if !ok {
		w.settleDelivery(msg, settleHandBack) // the worker began to shut down while it waited to set up
		return nil, nil
	}
	o := w.newLaneOwner(msg, charged)
	if o == nil {
		leave()
		return nil, nil
	}
	o.setUp = leave
	o.markHeld(true)
	return o, leave
}

// newLaneOwner is takeLane once the worker let the delivery set up.
func (w *Worker) newLaneOwner(msg jetstream.Msg, charged int64) *owner {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel() // only the lease's acquisition and a dead letter use it
	md, err := msg.Metadata()
	if err != nil {
		w.log.Error().Err(err).Msg("delivery without metadata")
		w.settleDelivery(msg, settleRetry)
		return nil
	}
	token, key, err := events.LaneOf(msg.Subject())
	if err != nil {
		// No lane can be derived: keep the message in the dead-letter
		// stream, or on its subject until the dead letter can be stored.
		end := settleDead
		if w.deadLetter(ctx, events.DeadBadLane, msg.Subject(), md.Sequence.Stream, msg.Headers(), msg.Data(), err) != nil {
			end = settleNotDead
		}
		w.settleDelivery(msg, end)
		return nil
	}
	log := w.log.With().Str("lane", token).Logger()
	info, lf := w.leaseInfo(md.Sequence.Stream)
	lease, err := w.lanes.Acquire(ctx, token, info)
	var heldErr *kvstore.HeldError
	switch {
	case errors.As(err, &heldErr) && holdsAsTrigger(heldErr.Holder, md):
		// The trigger of an owner that stopped keeping it alive: retry
		// until its lease lapses.
		w.settleDelivery(msg, settleRetry)
		return nil
	case errors.Is(err, kvstore.ErrHeld):
		// The owner drains this message; if it dies, its own trigger
		// wakes the lane.
		w.settleDelivery(msg, settleFollower)
		return nil
	case err != nil:
		log.Warn().Err(err).Msg("acquire lease")
		w.settleDelivery(msg, settleRetry)
		return nil
	}
	w.stats.Acquired.Add(1)
	return w.newOwner(token, key, msg.Subject(), ownerLease{Lease: lease, life: lf, trigger: msg, triggerSeq: md.Sequence.Stream}, charged)
}

func (w *Worker) deleteInbound(ctx context.Context, seq uint64) {
	if err := w.streams.Inbound.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		w.log.Debug().Err(err).Uint64("seq", seq).Msg("delete processed message")
	}
}
