package lanes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// letGo deletes what the owner processed (the trigger's message stays: the
// trigger is handed back), unmarks the lane held and releases the lease,
// before a trigger is handed back; why says so in a failed release's log.
func (o *owner) letGo(ctx context.Context, why string) {
	o.deleteProcessed(ctx, true)
	o.markHeld(false)
	if err := o.releaseLease(ctx); err != nil {
		o.log.Warn().Err(err).Msg("release lease " + why)
	}
	o.stats.Released.Add(1)
}

// releaseDeadLease gives up the lease of an owner stopped because its
// worker's life ended (declared dead, or lapsed). The lease may still be
// this owner's: taken or renewed after the survivors looked for the
// life's leases, or nobody took the lanes over (no other worker, none
// with a free slot, or this worker's own watch saw the end before its
// beat did). Left held, the lane would wait out the lease TTL. The
// release is fenced: a lease taken over already stays the survivor's; and
// it is given up (kvstore.Lease.GiveUp), so this worker, under its new
// life, retakes the lane no faster than the survivors do.
func (o *owner) releaseDeadLease() {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	o.markHeld(false) // before the release: see markHeld
	if err := o.lease.GiveUp(ctx); err != nil {
		o.log.Debug().Err(err).Msg("release the lease of a life that ended")
	}
}

// heartbeat renews an owner's lease every RenewEvery and keeps its trigger
// delivery alive (InProgress), until stop. It holds no goroutine while it
// waits: each renewal runs on the goroutine its timer starts, and re-arms
// the timer when it is done (an owner waits on its model for minutes, and
// a goroutine parked between renewals cost it a stack the whole time).
// Renewals keep to the grid RenewEvery apart from the start, like a
// ticker's: one that ran past the next is followed at once by one more.
type heartbeat struct {
	o      *owner
	ctx    context.Context // the drain's: a renewal never outlives it
	cancel context.CancelCauseFunc
	lease  *kvstore.Lease
	every  time.Duration

	mu      sync.Mutex
	timer   *time.Timer
	due     time.Time // the renewal the timer is armed for
	stopped bool
	// busy counts the renewal in progress (0 or 1): stop waits for it.
	busy sync.WaitGroup
}

// startHeartbeat renews lease, held under the drain's ctx, until stop;
// a lost lease cancels ctx with kvstore.ErrLeaseLost as its cause.
func (o *owner) startHeartbeat(ctx context.Context, cancel context.CancelCauseFunc, lease *kvstore.Lease) *heartbeat {
	h := &heartbeat{o: o, ctx: ctx, cancel: cancel, lease: lease, every: o.store.RenewEvery()}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.due = time.Now().Add(h.every)
	h.timer = time.AfterFunc(h.every, h.beat)
	return h
}

// stop ends the renewals and returns once none is in progress: after it
// no renewal runs, so the lease can be released without one racing the
// release. Cancel the drain's context first, to cut a renewal in progress
// short.
func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	h.mu.Unlock()
	h.busy.Wait()
}

// beat is one renewal, on the timer's goroutine: it renews the lease, and
// unless the lease was lost, the drain ended or stop was called, arms the
// timer for the next one.
func (h *heartbeat) beat() {
	h.mu.Lock()
	if h.stopped || h.ctx.Err() != nil {
		h.mu.Unlock()
		return
	}
	h.busy.Add(1) // under mu while not stopped: stop's Wait sees it
	h.mu.Unlock()
	defer h.busy.Done()
	if !h.renew() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	now := time.Now()
	h.due = h.due.Add(h.every)
	if h.due.Before(now) {
		h.due = now // a renewal ran late: the next one now (a ticker drops the ticks missed)
	}
	h.timer.Reset(h.due.Sub(now))
}

// renew renews the lease once and keeps the trigger delivery alive; false
// when the lease was lost (the drain's context is cancelled with that
// cause) and no renewal is to follow.
func (h *heartbeat) renew() bool {
	o := h.o
	rctx, rcancel := context.WithTimeout(h.ctx, h.every)
	err := h.lease.Renew(rctx)
	rcancel()
	if errors.Is(err, kvstore.ErrLeaseLost) {
		o.log.Warn().Err(err).Msg("lease lost: stopping the lane's work")
		h.cancel(err)
		return false
	}
	if err != nil && h.ctx.Err() == nil {
		o.log.Warn().Err(err).Msg("renew lease")
	}
	if o.lease.trigger != nil {
		if err := o.lease.trigger.InProgress(); err != nil {
			o.log.Debug().Err(err).Msg("trigger in progress")
		}
	}
	return true
}

// deleteProcessed deletes the inbound messages of the turns this owner
// committed, keeping next-by-subject lookups on the fast path. They are
// deleted one by one: a purge of the stream, even of one subject, makes
// nats-server (v2.15) drop the dispatch consumer's whole redelivery queue,
// so every Nak'd delivery of every lane would wait out AckWait. With
// keepTrigger the trigger's message stays (a Nak'd trigger whose message is
// gone is never redelivered, which would strand the lane's remaining
// messages), and so does the message of a turn whose final events are not
// stored yet (the sweep finds such a lane by it).
func (o *owner) deleteProcessed(ctx context.Context, keepTrigger bool) {
	keep := o.lane.processed[:0]
	var del []uint64
	for _, seq := range o.lane.processed {
		switch {
		case keepTrigger && o.lease.trigger != nil && seq == o.lease.triggerSeq, seq == o.lane.owed:
			keep = append(keep, seq)
		default:
			del = append(del, seq)
		}
	}
	o.lane.processed = keep
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, seq := range del {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			o.w.deleteInbound(ctx, seq)
		})
	}
	wg.Wait()
}

// release gives the lane up after a drain and says how that ended: endAgain
// when a message arrived during the release and the lease was taken again.
func (o *owner) release() ending {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Processed messages are deleted while the lease is held: once it is
	// released, another owner may take the lane with the delivery of one
	// of them as its trigger, and needs that message to hand it back.
	o.deleteProcessed(ctx, true)
	o.markHeld(false) // before the release: see markHeld
	if err := o.releaseLease(ctx); err != nil {
		// The trigger comes back soon; whoever gets it takes the lane once
		// the lease is free (released after all, or expired).
		o.log.Warn().Err(err).Msg("release lease")
		return endRetry
	}
	o.stats.Released.Add(1)
	// Re-check on the leader after releasing: a message stored before a
	// follower saw our lease is found here or by the next owner.
	_, err := o.next(ctx, o.lane.cursor.Seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return endReleased
	case err != nil:
		o.log.Warn().Err(err).Msg("re-check lane")
		return endRetry
	}
	if o.shuttingDown.Load() {
		return endShutdown
	}
	info, lf := o.w.leaseInfo(o.lease.triggerSeq)
	lease, err := o.store.Acquire(ctx, o.token, info)
	switch {
	case err == nil:
		o.lease.Lease, o.lease.life = lease, lf
		o.stats.Acquired.Add(1)
		o.markHeld(true)
		return endAgain
	case errors.Is(err, kvstore.ErrHeld):
		return endReleased
	}
	o.log.Warn().Err(err).Msg("re-acquire lease")
	return endRetry
}

// releaseLease releases the lease, naming the lane's cursor when the owner
// knows it for certain (laneState.left): this worker then takes the lane
// back without reading it, if nobody took the lane in between.
func (o *owner) releaseLease(ctx context.Context) error {
	if c := o.lane.left; c != nil {
		return o.lease.ReleaseAt(ctx, *c)
	}
	return o.lease.Release(ctx)
}

// Lanes this worker holds: a delivery of one of them, other than its
// owner's trigger, is acked at once, without a slot or a lease request. It
// is the follower case of handleDelivery (the lease is held, and its owner
// re-checks the lane after releasing it) decided locally: an owner marks
// its lane held only while it holds the lease, and unmarks it before it
// releases the lease.

// markHeld marks the owner's lane held (or no longer held) by this worker.
func (o *owner) markHeld(held bool) {
	if o.lease.marked == held {
		return
	}
	o.lease.marked = held
	o.w.hold(o.token, o.lease.triggerSeq, held)
}

// hold marks lane token held by an owner here whose trigger is trigger's
// delivery, or unmarks it (unless an owner with another trigger marked it
// since).
func (w *Worker) hold(token string, trigger uint64, held bool) {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	if held {
		w.held[token] = trigger
	} else if seq, ok := w.held[token]; ok && seq == trigger {
		delete(w.held, token)
	}
}

// heldHere reports whether a delivery is a follower of a lane an owner here
// holds (not that owner's own trigger coming back).
func (w *Worker) heldHere(msg jetstream.Msg) bool {
	token, ok := strings.CutPrefix(msg.Subject(), events.InboundPrefix)
	if !ok {
		return false
	}
	w.heldMu.Lock()
	trigger, held := w.held[token]
	wake := w.storedWake[token]
	w.heldMu.Unlock()
	if !held {
		return false
	}
	md, err := msg.Metadata()
	if err != nil || md.Sequence.Stream == trigger {
		return false
	}
	if wake != nil {
		// The dispatch consumer delivers a message once the stream
		// stored it: the owner looking for it can read it now.
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return true
}

// watchStored makes the deliveries of lane token's messages to this worker
// wake ch (an owner's quietWatch.stored) until unwatchStored.
func (w *Worker) watchStored(token string, ch chan struct{}) {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	if w.storedWake == nil {
		w.storedWake = map[string]chan struct{}{}
	}
	w.storedWake[token] = ch
}

// unwatchStored ends watchStored's wake-ups of ch (unless another owner's
// channel replaced it since).
func (w *Worker) unwatchStored(token string, ch chan struct{}) {
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	if w.storedWake[token] == ch {
		delete(w.storedWake, token)
	}
}

// triggerKept reports whether the owner's trigger can be handed back: its
// message still exists (a Nak'd delivery whose message is gone is never
// redelivered, and the lane would be stranded). A trigger whose message
// this owner processed is kept by deleteProcessed; one an earlier owner
// processed (the trigger of a yielded lane, or a delivery that reached the
// lane between two owners) is read once: an earlier owner deletes what it
// processed before it releases the lease, so what is there now stays.
func (o *owner) triggerKept(ctx context.Context) bool {
	if o.lease.triggerGone {
		return false
	}
	if o.lease.triggerSeq > o.lane.cursor.Seq || slices.Contains(o.lane.processed, o.lease.triggerSeq) || o.lease.triggerChecked {
		return true
	}
	_, err := o.streams.Inbound.GetMsg(ctx, o.lease.triggerSeq)
	switch {
	case err == nil:
		o.lease.triggerChecked = true
		return true
	case errors.Is(err, jetstream.ErrMsgNotFound):
		o.lease.triggerGone = true
	}
	return false
}
