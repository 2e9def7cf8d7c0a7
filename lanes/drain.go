package lanes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// errShuttingDown ends a drain when the worker shuts down before a turn started.
var errShuttingDown = errors.New("lanes: worker stopping")

// drain processes the lane's messages in order until none is left, the
// worker shuts down, or the lease is lost. It reports true when a fenced write
// found the lease lost.
func (o *owner) drain(ctx context.Context) bool {
	// The lane's first message is read while the cursor is: one round
	// trip less before the first turn (see firstLook).
	from := max(o.lane.cursor.Seq, o.transcripts.inboundOf(o.token))
	first := o.firstLook(ctx, from)
	o.openAhead(ctx, from)
	defer o.takeAhead(0) // a run opened ahead and not run is retired
	if !o.readLane(ctx, from, first) {
		return false
	}
	if lost, ok := o.keepOwed(ctx); !ok {
		return lost
	}
	defer o.endWatch()
	for !o.shuttingDown.Load() && ctx.Err() == nil {
		raw, err := o.look(ctx)
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) && ctx.Err() == nil {
				o.log.Warn().Err(err).Msg("read lane")
			}
			return false
		}
		if o.leavesBefore(ctx, raw) {
			return false
		}
		began := o.now()
		o.quiet.reset() // only this turn's steer poll can say the lane is empty
		err = o.process(ctx, raw)
		if err == nil {
			o.slot.turns, o.slot.lastTurn = o.slot.turns+1, o.now().Sub(began)
			continue
		}
		if lost, again := o.retryAfter(ctx, raw, err); !again {
			return lost
		}
	}
	return false
}

// readLane begins a drain: it reads the lane's cursor and settings, and
// keeps the first look's message (first, read after from) when it is the
// one after the cursor. It reports whether the cursor could be read.
func (o *owner) readLane(ctx context.Context, from uint64, first <-chan looked) bool {
	o.lane.left = nil // known again once read
	c, err := o.readCursor(ctx)
	if err != nil {
		<-first
		o.log.Warn().Err(err).Msg("read cursor and settings")
		return false
	}
	o.lane.first = nil
	if f := <-first; f.err == nil && from <= c.Seq && f.raw.Sequence > c.Seq {
		o.lane.first = f.raw
	}
	if a := o.lease.ahead; a != nil && a.seq <= c.Seq {
		// The trigger's message ran already: its claim is over before
		// publishOwed claims the same run's events (the two claims are
		// under one lease, and the later one retires the other's writes).
		o.takeAhead(0)
	}
	o.lane.cursor = c
	left := c
	o.lane.left = &left
	o.lane.ids = queue.NewIDs(o.streams.cfg.DedupeWindow, c.IDs)
	o.lane.tx = nil // another owner may have added to it since the last drain
	return true
}

// keepOwed publishes the final events the lane's newest record owes, if
// they are not known to be stored, before the drain takes any message. It
// reports whether the drain goes on, and if not whether the lease was lost.
func (o *owner) keepOwed(ctx context.Context) (lost, ok bool) {
	c := o.lane.cursor
	if c.Seq > 0 && c.Seq != o.lane.checked && o.transcripts.finalsStored(o.token, c.Stored, o.nc.Stats().Reconnects) {
		o.lane.checked = c.Seq // this worker stored the newest record's finals itself
	}
	if c.Seq == 0 || c.Seq == o.lane.checked {
		return false, true
	}
	// The last committed turn may have died between its record and its
	// final events: publish them from the record before anything else.
	// (Owners never move past a turn whose finals are missing, so only
	// the newest record can owe any.)
	o.lane.owed = c.Seq
	err := o.keepPromise(ctx, func(ctx context.Context) error { return o.publishOwed(ctx, c.Seq) })
	if err != nil {
		return errors.Is(err, kvstore.ErrLeaseLost), false
	}
	o.lane.owed, o.lane.checked = 0, c.Seq
	return false, true
}

// leavesBefore reports whether the drain ends before the lane's next
// message raw, and notes why for settleTrigger: its session is paused,
// it does not fit the byte budget, or the owner yields its slot.
func (o *owner) leavesBefore(ctx context.Context, raw *jetstream.RawStreamMsg) bool {
	if o.cfg.paused(o.key) {
		// The message stays: the lane waits, unconsumed, until Wake.
		o.slot.paused = true
		o.noticePaused(ctx, raw)
		return true
	}
	if need, ok := o.fits(raw); !ok {
		o.slot.overBudget = need
		return true
	}
	if o.w.shouldYield(o.token, o.slot.turns, o.slot.since, o.slot.lastTurn, o.lease.trigger) && o.yieldsBefore(raw) && o.triggerKept(ctx) {
		o.slot.yielded = true
		return true
	}
	return false
}

// retryAfter decides what follows a turn of raw that failed with err: the
// drain ends (lost: the lease was lost), or it tries the message again
// after a delay growing with its failures (again).
func (o *owner) retryAfter(ctx context.Context, raw *jetstream.RawStreamMsg, err error) (lost, again bool) {
	switch {
	case errors.Is(err, kvstore.ErrLeaseLost):
		return true, false
	case ctx.Err() != nil || errors.Is(err, errShuttingDown):
		return false, false
	case errors.Is(err, errNotDeadLettered):
		// The message stays; the lane goes back and is tried again
		// later, leaving the slot to lanes that can run.
		o.notDead = true
		return false, false
	}
	n := o.tried(raw.Sequence).attempt
	o.log.Warn().Err(err).Uint64("seq", raw.Sequence).Int("failures", n).Msg("turn failed; retrying")
	delay := backoff.Policy{Base: o.cfg.RetryDelay, Max: 30 * time.Second, Linear: true}.Delay(n)
	select {
	case <-time.After(delay):
		return false, true
	case <-ctx.Done():
		return false, false
	}
}

// look reads the lane's next message. After a turn whose last look found
// the lane empty, and whose watch has seen nothing arrive since, the lane
// is known to be empty: no read (the release reads it again anyway), unless
// a message arrives while the owner lingers.
func (o *owner) look(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	if raw := o.lane.first; raw != nil {
		o.lane.first = nil
		if raw.Sequence > o.lane.cursor.Seq {
			return raw, nil
		}
	}
	if !o.quiet.empty(o.lane.cursor.Seq, o.nc.Stats().Reconnects) {
		return o.next(ctx, o.lane.cursor.Seq)
	}
	if !o.linger(ctx) {
		o.stats.QuietSkips.Add(1)
		return nil, jetstream.ErrMsgNotFound
	}
	o.stats.Lingered.Add(1)
	raw, err := o.next(ctx, o.lane.cursor.Seq)
	for try := 0; try < 3 && errors.Is(err, jetstream.ErrMsgNotFound) && ctx.Err() == nil; try++ {
		// The watch can see a message before the stream stores it: the
		// owner reads again once its delivery reaches this worker (the
		// stream stored it then), or after a millisecond (in a fleet the
		// delivery may go to another worker).
		t := time.NewTimer(time.Millisecond)
		select {
		case <-o.quiet.stored:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		raw, err = o.next(ctx, o.lane.cursor.Seq)
	}
	if err == nil {
		o.stats.LingerHits.Add(1)
	}
	return raw, err
}

// looked is a read of the lane's next message.
type looked struct {
	raw *jetstream.RawStreamMsg
	err error
}

// firstLook reads the lane's first message after from (a guess at the
// cursor: the one this owner last knew, or the newest record this worker
// committed), in the background, once the lease is held. Read after the
// lease was taken, it is the first message after the cursor whenever from
// is at or before the cursor and the message past it: only the lease's
// holder deletes the lane's messages, and new ones come after it. So a
// drain starts with it instead of asking for the message after the cursor
// once the cursor is read; otherwise it is dropped and look reads as usual.
func (o *owner) firstLook(ctx context.Context, from uint64) <-chan looked {
	out := make(chan looked, 1)
	go func() {
		raw, err := o.next(ctx, from)
		out <- looked{raw, err}
	}()
	return out
}

// fits charges the owner's slot for the message it is about to run, when
// that is larger than what the slot is charged (its trigger's payload, or the
// largest message it ran), and reports whether the byte budget had room: a
// sender cannot pass large messages behind a small one. It returns the
// message's charge.
func (o *owner) fits(raw *jetstream.RawStreamMsg) (int64, bool) {
	need := o.sched.Charge(len(raw.Data))
	if need <= o.slot.charged {
		return need, true
	}
	if !o.sched.Grow(need - o.slot.charged) {
		return need, false
	}
	o.slot.charged = need
	return need, true
}

// readCursor reads the lane's cursor and sets the owner's settings, on the
// leader. Settings are stored only by an owner holding the lease, before
// the record that commits its turn, so a lane without a transcript message
// has none (a settings message whose owner died before its record runs
// again, on the settings before it), and the settings this worker knows as
// of the newest record are still these (see transcript.settings): only
// otherwise are they read.
func (o *owner) readCursor(ctx context.Context) (kvstore.Cursor, error) {
	c, known := o.lease.Left()
	var err error
	if known {
		// Taken back over this worker's own release, which named the
		// cursor it left: nobody wrote the lane since (kvstore.Lease.Left).
		o.stats.CursorsKnown.Add(1)
	} else {
		c, err = o.store.Cursor(ctx, o.token)
	}
	if errors.Is(err, kvstore.ErrCorrupt) {
		// c still holds the lane's position (kvstore.ErrCorrupt says why).
		o.log.Error().Err(err).Msg("newest transcript record unreadable: the lane goes on after it")
		err = nil
	}
	if err != nil {
		return c, err
	}
	if c.Stored == 0 {
		o.lane.settings = nil
		return c, nil
	}
	if known, at := o.transcripts.settingsOf(o.token); at != 0 && c.Stored == at {
		o.lane.settings = known
		return c, nil
	}
	settings, err := o.store.Settings(ctx, o.token)
	if err != nil {
		return c, err
	}
	o.lane.settings, err = events.DecodeSettings(settings)
	if err != nil {
		o.log.Warn().Err(err).Msg("stored settings unreadable: using the defaults")
	}
	return c, nil
}

// readTimeout bounds one read of the lane: a request lost in a leader
// change fails and is retried, instead of waiting out the caller's deadline
// (a turn's can be many minutes).
const readTimeout = 5 * time.Second

// next reads the lane's first message after seq, on the stream leader.
func (o *owner) next(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	return o.streams.Inbound.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(o.subject))
}

// decode decodes and checks an inbound message of the lane.
func (o *owner) decode(raw *jetstream.RawStreamMsg) (*events.Inbound, error) {
	in, err := events.DecodeInbound(raw.Header.Get(events.HeaderContentType), raw.Data, o.cfg.MaxPayload)
	if err == nil && in.Session != "" && in.Session != o.key {
		err = &events.DecodeError{Field: "session", Reason: fmt.Sprintf("%q does not match the lane's session", in.Session)}
	}
	return in, err
}

// process takes the next turn off the lane, starting at raw, and carries
// it out. The turn is committed by one fenced write, its record, which also
// moves the lane's cursor past every message the turn consumed.
func (o *owner) process(ctx context.Context, raw *jetstream.RawStreamMsg) error {
	defer o.setUpDone() // a turn that never reaches the handler is set up too
	p, err := o.planTurn(ctx, o.read(raw))
	if err != nil {
		return err
	}
	a, err := o.open(ctx, p)
	if a != nil {
		// Once the attempt is over its emitter publishes nothing more
		// (a handler goroutine may still emit): the owner's next attempt
		// at the run claims it anew.
		defer a.em.Retire()
	}
	if err != nil || a.poisoned {
		return err
	}
	if err := o.loadHistory(ctx); err != nil {
		return err
	}
	if p.verb == queue.VerbDuplicate {
		return o.duplicate(ctx, a.em, p)
	}
	if p.verb == queue.VerbInvalid {
		// Dead-lettered before its start event: a dead letter that cannot
		// be stored leaves the message and the run's attempts as they were.
		_, decErr := o.decode(p.run.raw)
		if err := o.deadLetter(ctx, "invalid", p.run.raw, decErr); err != nil {
			return err
		}
	}
	// A turn that runs the handler watches for cuts from before its start
	// event on: a client that saw the start and sends an interrupt or a
	// stop is never missed.
	turnCtx, endCutWatch := ctx, func() {}
	if p.verb == queue.VerbRun {
		turnCtx, endCutWatch = o.watchCuts(ctx)
	}
	defer endCutWatch()
	a.parent = o.parentOf(p)
	if err := o.start(ctx, a); err != nil {
		return err
	}
	err = o.carryOut(ctx, turnCtx, endCutWatch, a, p)
	if sf := (*storeFailure)(nil); errors.As(err, &sf) && ctx.Err() == nil && !errors.Is(err, kvstore.ErrLeaseLost) {
		// The turn's record, or its handler's step journal, met a store
		// that did not answer: end the attempt on record as one that
		// does not count, before this owner retries the message.
		o.endAttempt(ctx, a, sf.err, true)
	}
	return err
}

// carryOut carries out a started attempt's turn: the handler's, or the
// owner's own for a message the handler never sees.
func (o *owner) carryOut(ctx, turnCtx context.Context, endCutWatch func(), a *attempt, p *plan) error {
	switch p.verb {
	case queue.VerbInvalid:
		_, decErr := o.decode(p.run.raw)
		return o.failTurn(ctx, a.em, p, "invalid_input", decErr.Error(), a.attempt)
	case queue.VerbSettings:
		if why := o.refuseSettings(p.in); why != "" {
			return o.failTurn(ctx, a.em, p, "invalid_input", why, a.attempt)
		}
		return o.applySettings(ctx, a.em, p)
	case queue.VerbStop:
		return o.stop(ctx, a.em, p)
	case queue.VerbReject:
		// It arrived while the session was busy (the turn before it ended
		// after it arrived): refuse it, as the sender asked.
		return o.failTurn(ctx, a.em, p, events.KindRejected, "the session was busy when this message arrived (mode reject); it was not run", a.attempt)
	case queue.VerbDrop:
		return o.failTurn(ctx, a.em, p, events.KindDropped, "the session was busy when this heartbeat arrived; it was dropped", a.attempt)
	case queue.VerbInterrupted:
		return o.interrupted(ctx, a.em, p, a.attempt, nil, false)
	}
	if why := o.unsealedLineage(p); why != "" {
		o.log.Warn().Str("run", p.run.runID()).Msg("refused a message with sub-agent lineage the fleet did not seal")
		return o.failTurn(ctx, a.em, p, events.KindRejected, why, a.attempt)
	}
	if o.unknownCompletion(p) {
		return o.failTurn(ctx, a.em, p, events.KindDropped, "a sub-agent's completion for a child this session does not have pending (delivered already, or not spawned here): it was not run", a.attempt)
	}
	return o.runTurn(ctx, turnCtx, endCutWatch, a, p)
}
