package lanes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// owner drains one lane while it holds the lease.
type owner struct {
	w          *Worker
	token, key string
	subject    string
	trigger    jetstream.Msg
	triggerSeq uint64
	lease      *kvstore.Lease
	log        zerolog.Logger
	cancel     context.CancelCauseFunc // ends the current drain (a newer owner fenced its events)

	cursor   kvstore.Cursor
	settings *events.Settings // the lane's stored queue and run settings; nil = none
	// ids are the lane's message ids for de-duplication: the newest
	// record's, then those of every message this drain read.
	ids *queue.IDs
	// tx is the lane's transcript as this drain knows it; nil = not read
	// yet (see readHistory).
	tx *transcript
	// checked is the inbound seq of the newest record whose final events
	// this owner found stored (0: none yet). A drain whose cursor names
	// another record checks it again: a record write whose answer was
	// lost may have been stored, and the owner that retries the lane
	// finds it only then.
	checked  uint64
	failures map[uint64]*tried // this owner's attempts, per inbound seq
	// inFlight is the attempt this owner started whose end is not on
	// record yet (nil: none): if the owner loses the lane, the attempt is
	// noted as one that does not count (see UncountedToken).
	inFlight *flight
	lastEnd  time.Time // when this owner's last turn ended (reject, collect debounce)
	// done lists the inbound messages of committed turns this owner has
	// not deleted yet.
	done []uint64
	// stopped is what the lane's last stop command cut.
	stopped stopped
	// unsettled is the inbound sequence of a committed turn whose final
	// events are not all stored yet; 0 = none. While it is set the owner
	// neither moves on nor releases the lane, and it never deletes that
	// message: the lane's next owner (or the sweep) keeps the promise.
	unsettled uint64
	// since is when the owner took its slot, turns the turns it has run
	// since; yielded says the drain ended to give the slot to a lane
	// waiting for one (fair scheduling).
	since    time.Time
	turns    int
	lastTurn time.Duration // how long the last of them took
	yielded  bool
	// held is what the owner's slot holds of the byte budget; it grows to
	// the largest message the owner runs (fits), and goes back with the
	// slot. overBudget: the drain ended because the lane's next message,
	// charged this many bytes, did not fit; 0 = it did not.
	held       int64
	overBudget int64
	// notDead: the drain ended at a message whose dead letter could not
	// be stored (errNotDeadLettered).
	notDead bool
	// quiet is the drain's watch of the lane (see watchCuts) and what it
	// knows; nil until a turn of the drain starts one.
	quiet *quietWatch
	// triggerGone: the trigger's message was deleted (an earlier owner
	// processed it), so the trigger cannot be handed back: no yield.
	triggerGone, triggerChecked bool
	// holding: the lane is marked held by this worker (see hold), so its
	// other deliveries are acked without a slot. Unmarked before every
	// release of the lease.
	holding bool
	// setUp gives back the owner's place in the worker's set-up gate once
	// its first turn reaches the handler (or the owner ends); nil for an
	// owner the sweep started, which never entered it.
	setUp func()
}

// run drains the lane, then releases it (lease-and-drain). Each lease gets
// its own heartbeat, stopped before the lease is released so a renewal never
// races the release. How the drain ended decides, in settle, what becomes
// of the trigger delivery.
func (o *owner) run() {
	for {
		ctx, cancel := context.WithCancelCause(o.w.turnCtx)
		o.cancel = cancel
		hbDone := make(chan struct{})
		go o.heartbeat(ctx, cancel, o.lease, hbDone)
		lostInDrain := o.drain(ctx)
		lost := lostInDrain || errors.Is(context.Cause(ctx), kvstore.ErrLeaseLost)
		cancelled := ctx.Err() != nil
		cancel(nil)
		<-hbDone
		if f := o.inFlight; lost && f != nil {
			// This worker is alive: the turn it was running did not kill
			// it, so the attempt does not count against the message.
			o.inFlight = nil
			why := "its worker lost the session's lane mid-turn"
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				why += ": " + cause.Error()
			}
			o.noteUncounted(f.seq, f.attempt, why)
		}
		// The lane's next owner knows only what the runs' notes say.
		o.noteExcused()
		var end ending
		switch {
		case lost:
			// Someone else may own the lane now, or nobody: let the trigger
			// be redelivered to whoever needs it.
			end = endLost
		case cancelled || o.unsettled != 0:
			// Stopping, or a committed turn's final events could not be
			// stored before the worker began to stop: hand the lane over
			// with its trigger, and the next owner keeps the promise.
			end = endHandOver
		case o.yielded:
			end = endYield
		case o.overBudget > 0:
			end = endOverBudget
		case o.notDead:
			end = endNotDead
		default:
			end = o.release()
		}
		if end == endAgain {
			continue
		}
		o.settle(end)
		return
	}
}

// ending is how an owner's work on its lane ended; settle acts on it.
type ending uint8

const (
	// endDone: the lane was drained and released (or another owner took
	// it right after): ack the trigger, delete what was processed.
	endDone ending = iota
	// endAgain: a message arrived during the release and the lease was
	// taken again: drain once more.
	endAgain
	// endLost: the lease was lost: hand the trigger back at once.
	endLost
	// endHandOver: the worker stops mid-drain, or a committed turn's
	// final events are not stored: release the lease and hand the
	// trigger back at once; the next owner continues.
	endHandOver
	// endStopping: released with messages left while the worker stops:
	// hand the trigger back at once.
	endStopping
	// endRetry: the release, the re-check or the re-acquire failed: the
	// trigger comes back in a second, to whoever can take the lane then.
	endRetry
	// endOverBudget: the lane's next message does not fit the byte
	// budget: release the lease and hand the trigger back; it is charged
	// what that message needs (slots.overBudget), so it waits in line
	// here until the payloads in flight leave room.
	endOverBudget
	// endYield: the owner gives its slot to a lane that waits for one,
	// with messages left: release the lease and hand the trigger back at
	// once; it waits in line (at the end) to drain the rest.
	endYield
	// endNotDead: the lane's next message must be dead-lettered and its
	// dead letter could not be stored: release the lease and hand the
	// trigger back after deadRetryDelay; the message stays.
	endNotDead
)

// settle is the one place that acks or naks the trigger delivery, and
// deletes the messages of committed turns, for how the owner's work ended.
// The trigger's own message stays whenever the trigger is handed back (a
// Nak'd trigger whose message is gone is never redelivered), and so does
// the message of a turn whose final events are not stored yet.
func (o *owner) settle(end ending) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch end {
	case endDone:
		if o.w.stopping.Load() && o.trigger != nil && o.triggerSeq > o.cursor.Seq {
			o.w.nak(o.trigger, 0)
			return
		}
		o.w.ack(ctx, o.trigger)
		if o.trigger != nil && o.triggerSeq <= o.cursor.Seq && !slices.Contains(o.done, o.triggerSeq) {
			// A trigger an earlier owner handed back after processing
			// its message (a yield): that message goes too.
			o.done = append(o.done, o.triggerSeq)
		}
		o.deleteProcessed(ctx, false)
	case endHandOver:
		o.letGo(ctx, "on stop")
		o.w.nak(o.trigger, 0)
	case endLost:
		// Nothing is deleted: another owner may hold the lane, with the
		// delivery of one of these messages as its trigger. The sweep
		// deletes them once the lane is idle.
		o.w.nak(o.trigger, 0)
	case endStopping:
		o.w.nak(o.trigger, 0)
		o.deleteProcessed(ctx, true)
	case endRetry:
		o.w.nak(o.trigger, time.Second)
	case endOverBudget:
		o.letGo(ctx, "over the byte budget")
		o.w.stats.OverBudget.Add(1)
		// Before the trigger goes back: its redelivery is charged what
		// the lane needs.
		o.w.sched.overBudget(o.token, o.overBudget, time.Now())
		o.w.nak(o.trigger, busyNakDelay)
	case endNotDead:
		o.letGo(ctx, "while a dead letter cannot be stored")
		o.w.nak(o.trigger, o.w.cfg.deadRetry)
	case endYield:
		// Released before the trigger goes back, so its redelivery can
		// take the lane.
		o.letGo(ctx, "to yield")
		o.w.stats.Yields.Add(1)
		o.w.sched.requeue(o.token, time.Now())
		o.w.nak(o.trigger, 0)
	}
}

// letGo deletes what the owner processed (the trigger's message stays: the
// trigger is handed back), unmarks the lane held and releases the lease,
// before a trigger is handed back; why says so in a failed release's log.
func (o *owner) letGo(ctx context.Context, why string) {
	o.deleteProcessed(ctx, true)
	o.hold(false)
	if err := o.lease.Release(ctx); err != nil {
		o.log.Warn().Err(err).Msg("release lease " + why)
	}
	o.w.stats.Released.Add(1)
}

// heartbeat renews the lease and keeps the trigger delivery alive.
func (o *owner) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, lease *kvstore.Lease, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(o.w.lanes.RenewEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, rcancel := context.WithTimeout(ctx, o.w.lanes.RenewEvery())
		err := lease.Renew(rctx)
		rcancel()
		if errors.Is(err, kvstore.ErrLeaseLost) {
			o.log.Warn().Err(err).Msg("lease lost: stopping the lane's work")
			cancel(err)
			return
		}
		if err != nil && ctx.Err() == nil {
			o.log.Warn().Err(err).Msg("renew lease")
		}
		if o.trigger != nil {
			if err := o.trigger.InProgress(); err != nil {
				o.log.Debug().Err(err).Msg("trigger in progress")
			}
		}
	}
}

// errStopping ends a drain when the worker stops before a turn started.
var errStopping = errors.New("lanes: worker stopping")

// drain processes the lane's messages in order until none is left, the
// worker stops, or the lease is lost. It reports true when a fenced write
// found the lease lost.
func (o *owner) drain(ctx context.Context) bool {
	c, err := o.readCursor(ctx)
	if err != nil {
		o.log.Warn().Err(err).Msg("read cursor and settings")
		return false
	}
	o.cursor = c
	o.ids = queue.NewIDs(o.w.streams.cfg.DedupeWindow, c.IDs)
	o.tx = nil // another owner may have added to it since the last drain
	if c.Seq > 0 && c.Seq != o.checked && o.w.transcripts.settled(o.token, c.Stored, o.w.nc.Stats().Reconnects) {
		o.checked = c.Seq // this worker stored the newest record's finals itself
	}
	if c.Seq > 0 && c.Seq != o.checked {
		// The last committed turn may have died between its record and its
		// final events: publish them from the record before anything else.
		// (Owners never move past a turn whose finals are missing, so only
		// the newest record can owe any.)
		o.unsettled = c.Seq
		err := o.keepPromise(ctx, func(ctx context.Context) error { return o.settleRecord(ctx, c.Seq) })
		if err != nil {
			return errors.Is(err, kvstore.ErrLeaseLost)
		}
		o.unsettled, o.checked = 0, c.Seq
	}
	defer o.endWatch()
	for !o.w.stopping.Load() && ctx.Err() == nil {
		raw, err := o.look(ctx)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false
		}
		if err != nil {
			if ctx.Err() == nil {
				o.log.Warn().Err(err).Msg("read lane")
			}
			return false
		}
		if need, ok := o.fits(raw); !ok {
			o.overBudget = need
			return false
		}
		if o.w.shouldYield(o.turns, o.since, o.lastTurn, o.trigger) && o.yieldsBefore(raw) && o.triggerKept(ctx) {
			o.yielded = true
			return false
		}
		began := time.Now()
		o.quiet.reset() // only this turn's steer poll can say the lane is empty
		err = o.process(ctx, raw)
		switch {
		case err == nil:
			o.turns, o.lastTurn = o.turns+1, time.Since(began)
			continue
		case errors.Is(err, kvstore.ErrLeaseLost):
			return true
		case ctx.Err() != nil || errors.Is(err, errStopping):
			return false
		case errors.Is(err, errNotDeadLettered):
			// The message stays; the lane goes back and is tried again
			// later, leaving the slot to lanes that can run.
			o.notDead = true
			return false
		}
		n := o.tried(raw.Sequence).attempt
		o.log.Warn().Err(err).Uint64("seq", raw.Sequence).Int("failures", n).Msg("turn failed; retrying")
		delay := min(o.w.cfg.RetryDelay*time.Duration(max(n, 1)), 30*time.Second)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return false
		}
	}
	return false
}

// look reads the lane's next message. After a turn whose last look found
// the lane empty, and whose watch has seen nothing arrive since, the lane
// is known to be empty: no read (the release reads it again anyway), unless
// a message arrives while the owner lingers.
func (o *owner) look(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	if !o.quiet.empty(o.cursor.Seq, o.w.nc.Stats().Reconnects) {
		return o.next(ctx, o.cursor.Seq)
	}
	if !o.linger(ctx) {
		o.w.stats.QuietSkips.Add(1)
		return nil, jetstream.ErrMsgNotFound
	}
	o.w.stats.Lingered.Add(1)
	raw, err := o.next(ctx, o.cursor.Seq)
	for try := 0; try < 3 && errors.Is(err, jetstream.ErrMsgNotFound) && ctx.Err() == nil; try++ {
		// The watch can see a message before the stream stores it.
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
		}
		raw, err = o.next(ctx, o.cursor.Seq)
	}
	if err == nil {
		o.w.stats.LingerHits.Add(1)
	}
	return raw, err
}

// fits charges the owner's slot for the message it is about to run, when
// that is larger than what the slot holds (its trigger's payload, or the
// largest message it ran), and reports whether the byte budget had room: a
// sender cannot pass large messages behind a small one. It returns the
// message's charge.
func (o *owner) fits(raw *jetstream.RawStreamMsg) (int64, bool) {
	need := o.w.sched.charge(len(raw.Data))
	if need <= o.held {
		return need, true
	}
	if !o.w.sched.grow(need - o.held) {
		return need, false
	}
	o.held = need
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
	c, err := o.w.lanes.Cursor(ctx, o.token)
	if errors.Is(err, kvstore.ErrCorrupt) {
		// c still holds the lane's position (kvstore.ErrCorrupt says why).
		o.log.Error().Err(err).Msg("newest transcript record unreadable: the lane goes on after it")
		err = nil
	}
	if err != nil {
		return c, err
	}
	if c.Stored == 0 {
		o.settings = nil
		return c, nil
	}
	if known, at := o.w.transcripts.settingsOf(o.token); at != 0 && c.Stored == at {
		o.settings = known
		return c, nil
	}
	settings, err := o.w.lanes.Settings(ctx, o.token)
	if err != nil {
		return c, err
	}
	o.settings, err = events.DecodeSettings(settings)
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
	return o.w.streams.Inbound.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(o.subject))
}

// decode decodes and checks an inbound message of the lane.
func (o *owner) decode(raw *jetstream.RawStreamMsg) (*events.Inbound, error) {
	in, err := events.DecodeInbound(raw.Header.Get(events.HeaderContentType), raw.Data, o.w.cfg.MaxPayload)
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
		defer a.em.retire()
	}
	if err != nil || a.done {
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
		if err := o.w.deadLetter(ctx, "invalid", o.subject, a.seq, p.run.raw.Header, p.run.raw.Data, decErr); err != nil {
			return err
		}
	}
	// A turn that runs the handler watches for cuts from before its start
	// event on: a client that saw the start and sends an interrupt or a
	// stop is never missed.
	turnCtx, stopWatch := ctx, func() {}
	if p.verb == queue.VerbRun {
		turnCtx, stopWatch = o.watchCuts(ctx)
	}
	defer stopWatch()
	if err := o.start(ctx, a); err != nil {
		return err
	}
	err = o.carryOut(ctx, turnCtx, stopWatch, a, p)
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
func (o *owner) carryOut(ctx, turnCtx context.Context, stopWatch func(), a *attempt, p *plan) error {
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
	return o.runTurn(ctx, turnCtx, stopWatch, a, p)
}

// attempt is one attempt at a turn: its run's emitter, fenced for this
// owner, and its number.
type attempt struct {
	em      *emitter
	seq     uint64 // the inbound sequence whose run carries the turn
	attempt int
	restart bool // an earlier attempt started
	log     zerolog.Logger
	done    bool // the turn ended before it started (dead-lettered as poison)
}

// open fences the run's events, so an earlier owner still running it can no
// longer publish; then continues what earlier attempts (a crash, a lost
// lease, a failed try) left: their sequence, an attempt that never ended,
// their count. A turn started too often is dead-lettered as poison.
func (o *owner) open(ctx context.Context, p *plan) (*attempt, error) {
	seq := p.run.raw.Sequence
	run := strconv.FormatUint(seq, 10)
	log := o.log.With().Str("run_id", run).Logger()
	em := o.newEmitter(ctx, run, log, isJSON(p.run.raw))
	if o.cursor.SessionID == "" {
		o.cursor.SessionID = sessionfile.NewSessionID()
	}
	st, err := em.open(ctx, o.lease.Revision())
	if err != nil {
		return nil, err
	}
	mine := o.tried(seq)
	why, silent, err := o.closeAttempt(ctx, em, st, seq)
	if err != nil {
		return nil, err
	}
	a := &attempt{em: em, seq: seq, attempt: max(st.attempt, mine.attempt) + 1, restart: st.attempt > 0, log: log}
	em.attempt = a.attempt
	counted, err := o.counted(ctx, seq, a.attempt, silent)
	if err != nil {
		return nil, err
	}
	if counted >= o.w.cfg.MaxAttempts {
		// The dead letter and the sender's error name what ended the
		// last attempt: its error, or its worker's end.
		cause := fmt.Errorf("turn started %d times without finishing", counted)
		if last := cmp.Or(why, st.lastError); last != "" {
			cause = fmt.Errorf("%w; %s", cause, last)
		}
		for _, c := range append([]collected{p.run}, p.merged...) {
			if err := o.w.deadLetter(ctx, events.DeadPoison, o.subject, c.raw.Sequence, c.raw.Header, c.raw.Data, cause); err != nil {
				return nil, err
			}
		}
		a.done = true
		return a, o.failTurn(ctx, em, p, "poison_message", cause.Error()+"; the message was dead-lettered", a.attempt)
	}
	return a, nil
}

// loadHistory gets the transcript once per drain, before the turn counts as
// an attempt: a store that is briefly unavailable delays the lane but never
// dead-letters a message. The worker's copy from an earlier turn is used
// as far as it goes (readHistory).
func (o *owner) loadHistory(ctx context.Context) error {
	if o.tx != nil {
		return nil
	}
	tx, err := o.readHistory(ctx, o.cursor)
	if errors.Is(err, kvstore.ErrCorrupt) {
		o.log.Error().Err(err).Msg("transcript records unreadable: the turn runs without them")
	} else if err != nil {
		return err
	}
	o.tx = tx
	return nil
}

// start stores the attempt's first event before the turn starts, so a
// message that kills its worker is counted and dead-lettered at last.
func (o *owner) start(ctx context.Context, a *attempt) error {
	data := events.EventData{Phase: events.PhaseStart, StartedAt: time.Now().UnixMilli(), Worker: o.w.cfg.ID, InboundSeq: a.seq}
	if a.restart {
		data.Phase = events.PhaseRestart
	}
	if err := a.em.start(ctx, data, a.attempt); err != nil {
		if kvstore.Transient(err) {
			// The start event may be stored all the same: then the
			// attempt ended on a store error. Its number is spent either
			// way (the next attempt has the next one), so its note
			// excuses nothing else.
			why := attemptStoreError(a.attempt, err)
			t := o.tried(a.seq)
			t.attempt = a.attempt
			t.ended(a.attempt, why, true)
			o.noteUncounted(a.seq, a.attempt, why)
		}
		return err
	}
	o.tried(a.seq).attempt = a.attempt
	o.inFlight = &flight{seq: a.seq, attempt: a.attempt}
	return nil
}

// runTurn runs the handler on the turn, under turnCtx (cut by an
// interrupt, rollback or stop: see watchCuts), and commits what it returns.
func (o *owner) runTurn(ctx, turnCtx context.Context, stopWatch func(), a *attempt, p *plan) error {
	turn := &Turn{SessionKey: o.key, Token: o.token, SessionID: o.cursor.SessionID, RunID: a.em.run, Seq: a.seq,
		Attempt: a.attempt, Worker: o.w.cfg.ID, Inbound: p.in, History: slices.Clip(o.tx.entries), Received: p.run.raw.Time, Header: p.run.raw.Header, em: a.em,
		Settings: o.settings.RunSettings()}
	if o.cursor.State != nil {
		turn.State = *o.cursor.State
	}
	turn.steer = o.steerer(p)
	turn.steps = &StepLog{j: o.w.lanes.Journal(o.token, a.seq), first: a.attempt == 1}
	out, err := o.callHandler(turnCtx, turn, a.log)
	cut := errors.Is(context.Cause(turnCtx), errInterrupted) || errors.Is(context.Cause(turnCtx), errStopped)
	stopWatch()
	if cut && err != nil && ctx.Err() == nil {
		if err := o.interrupted(ctx, a.em, p, a.attempt, out, true); err != nil {
			return err
		}
		o.w.dropSteps(turn.steps.j)
		return nil
	}
	if err != nil {
		if turn.steps.storeError() != nil {
			// The handler failed because its step journal could not be
			// read or written: the attempt ended on the store, not on the
			// turn (see process).
			return &storeFailure{err}
		}
		if ctx.Err() == nil && !errors.Is(err, kvstore.ErrLeaseLost) {
			o.endAttempt(ctx, a, err, false)
		}
		return err
	}
	// The turn ended now, before its final event is published: a message
	// sent after a client saw that event never counts as "while busy".
	o.lastEnd = time.Now()
	if err := o.commit(ctx, a.em, p, out); err != nil {
		return err
	}
	o.w.stats.Turns.Add(1)
	o.w.dropSteps(turn.steps.j)
	return nil
}

// tried is what an owner knows of its own attempts at one message.
type tried struct {
	attempt int // the newest attempt this owner started (its start event stored)
	// end is an attempt of this owner's that ended, perhaps without its
	// aborted event stored (0: none): endWhy is that event's text, and
	// endStore says it ended on a transient store error. closeAttempt
	// puts it on record if the event is missing.
	end      int
	endWhy   string
	endStore bool
	// excused are the attempts this owner knows do not count (see
	// UncountedToken), and whether their note is stored.
	excused map[int]*excuse
}

// excuse is an attempt that does not count: why, and whether its note on
// the run is stored.
type excuse struct {
	why   string
	noted bool
}

// ended notes that attempt n ended: why is its aborted event's text.
func (t *tried) ended(n int, why string, store bool) {
	t.end, t.endWhy, t.endStore = n, why, store
}

// excuse notes that attempt n does not count (why), and returns its excuse.
func (t *tried) excuse(n int, why string) *excuse {
	if t.excused == nil {
		t.excused = map[int]*excuse{}
	}
	e := t.excused[n]
	if e == nil {
		e = &excuse{why: why}
		t.excused[n] = e
	}
	return e
}

// flight is an attempt in flight: the inbound sequence of its run and its
// number.
type flight struct {
	seq     uint64
	attempt int
}

// counted returns how many of the attempts at the message of inbound seq
// before attempt n count toward MaxAttempts: all but those that ended for
// no fault of the message (see UncountedToken). The run's notes are read
// only when what the owner knows itself puts the message at the limit.
// silent says the last attempt ended without a word (closeAttempt): its
// worker died, or it lost the lane and is about to note it; before the
// message is dead-lettered that worker gets noteGrace to do so.
func (o *owner) counted(ctx context.Context, seq uint64, n int, silent bool) (int, error) {
	mine := 0
	for m := range o.tried(seq).excused {
		if m < n {
			mine++
		}
	}
	if n-1-mine < o.w.cfg.MaxAttempts {
		return n - 1 - mine, nil
	}
	deadline := time.Now().Add(o.w.noteGrace())
	for {
		excused, err := o.uncounted(ctx, seq, n)
		if err != nil {
			return 0, err
		}
		counted := n - 1 - len(excused)
		if counted < o.w.cfg.MaxAttempts || !silent || !time.Now().Before(deadline) {
			if counted >= o.w.cfg.MaxAttempts {
				o.log.Warn().Str("run_id", strconv.FormatUint(seq, 10)).Int("attempts", n-1).Int("counted", counted).
					Ints("uncounted", slices.Sorted(maps.Keys(excused))).Msg("the message's attempts are spent: dead-lettering it as poison")
			}
			return counted, nil
		}
		select {
		case <-time.After(max(o.w.lanes.LeaseTTL()/8, 50*time.Millisecond)):
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-o.w.stopCh:
			return 0, errStopping
		}
	}
}

// tried returns what the owner knows of its attempts at inbound seq.
func (o *owner) tried(seq uint64) *tried {
	if o.failures == nil {
		o.failures = map[uint64]*tried{}
	}
	t := o.failures[seq]
	if t == nil {
		t = &tried{}
		o.failures[seq] = t
	}
	return t
}

// storeFailure is the error of an attempt that ended on a transient store
// error (kvstore.Transient): its turn's record could not be stored, or its
// handler failed after its step journal could not be read or written. The
// attempt does not count toward MaxAttempts.
type storeFailure struct{ err error }

func (e *storeFailure) Error() string { return e.err.Error() }
func (e *storeFailure) Unwrap() error { return e.err }

// endAttempt ends attempt a, which failed with err (store: on a transient
// store error, which does not count toward MaxAttempts: it is noted so),
// on record before this owner retries the message, so the next attempt
// continues after it. An aborted event that cannot be stored now is
// published by the next attempt (closeAttempt).
func (o *owner) endAttempt(ctx context.Context, a *attempt, err error, store bool) {
	o.inFlight = nil
	why := attemptFailed(a.attempt, o.w.cfg.MaxAttempts, err)
	if store {
		why = attemptStoreError(a.attempt, err)
		o.noteUncounted(a.seq, a.attempt, why)
	}
	o.tried(a.seq).ended(a.attempt, why, store)
	o.w.stats.Aborted.Add(1)
	if aerr := a.em.abort(ctx, why); aerr != nil {
		a.log.Warn().Err(aerr).Msg("aborted event")
	}
}

// closeAttempt ends an attempt that started and never ended on record with
// an aborted event, so a viewer sees start … aborted, restart … rather than
// a restart out of nowhere: this owner knows how it ended, or its worker
// died or lost the lane mid-run (silent). seq is the run's inbound
// sequence. It returns the event's text ("" when it published none).
func (o *owner) closeAttempt(ctx context.Context, em *emitter, st runState, seq uint64) (why string, silent bool, err error) {
	if st.attempt == 0 || st.finished || st.lastPhase == events.PhaseAborted {
		return "", false, nil
	}
	mine := o.tried(seq)
	o.w.stats.Aborted.Add(1)
	why, silent = fmt.Sprintf("attempt %d did not finish: the worker running it stopped or lost the session's lane", st.attempt), true
	if mine.end == st.attempt {
		why, silent = mine.endWhy, false
		if mine.endStore {
			o.noteUncounted(seq, st.attempt, why) // unless it is noted
		}
	}
	return why, silent, em.aborted(ctx, st.attempt, why)
}

// maxFailureText bounds the error of a failed attempt as its aborted event
// and the dead letter show it (in runes).
const maxFailureText = 500

// attemptFailed is the text of the aborted event that ends attempt n (of
// at most max) because the handler failed with err: the error on one line,
// bounded, and whether the message is tried again. The handler's error is
// the sender's to read: the fleet's handler masks its secrets.
func attemptFailed(n, max int, err error) string {
	msg := fmt.Sprintf("attempt %d failed: %s", n, failureText(err))
	if n < max {
		msg += "; it is retried"
	}
	return msg
}

// attemptStoreError is the text of the aborted event that ends attempt n
// on a transient store error err: the message is always tried again.
func attemptStoreError(n int, err error) string {
	return fmt.Sprintf("attempt %d ended on a store error (it does not count toward the attempt limit): %s; it is retried", n, failureText(err))
}

// failureText is err on one line, bounded by maxFailureText.
func failureText(err error) string {
	text := strings.Join(strings.Fields(err.Error()), " ")
	if r := []rune(text); len(r) > maxFailureText {
		text = string(r[:maxFailureText]) + "…"
	}
	return text
}

// commit writes the turn's record (fenced), which moves the cursor past
// every message the turn consumed. The record is a promise: the turn's run
// gets its final event, then the runs of the messages the turn consumed
// without running them get theirs, and the owner retries until they are
// stored before it takes the next message or releases the lane.
func (o *owner) commit(ctx context.Context, em *emitter, p *plan, out *Outcome) error {
	if out.Result != nil {
		out.Result.Meta.Consumed = p.consumed()
	}
	// The session's state rides on every record: the newest one's is the
	// session's, whatever kind of turn wrote it.
	state := nextState(o.cursor.State, out)
	rec := kvstore.Record{InboundSeq: p.through, RunID: em.run, SessionID: o.cursor.SessionID, Entries: out.Entries, State: state,
		IDs: o.ids.Recent(p.through, p.newest())}
	if out.Result != nil {
		if state != o.cursor.State {
			out.Result.Meta.Session = state
		}
		var err error
		if rec.Final, _, err = events.EncodeEvent(&events.Event{Stream: events.StreamFinal, Data: events.EventData{Result: out.Result}}, false); err != nil {
			return err
		}
	}
	reconnects := o.w.nc.Stats().Reconnects // before the finals: a reconnect after them may have lost them
	written, err := o.lease.PutRecord(ctx, rec)
	if err != nil {
		if kvstore.Transient(err) {
			return &storeFailure{err}
		}
		return err
	}
	o.inFlight = nil // the turn is committed: its attempts no longer matter
	o.cursor.Seq, o.cursor.Stored, o.cursor.State = p.through, written.Seq, state
	o.done = append(o.done, p.run.raw.Sequence)
	for _, c := range p.merged {
		o.done = append(o.done, c.raw.Sequence)
	}
	for _, d := range p.dropped {
		o.done = append(o.done, d.c.raw.Sequence)
	}
	clear(o.failures)
	if o.tx != nil {
		o.tx = o.w.transcripts.committed(o.tx, rec, written)
		o.w.transcripts.noteSettings(o.token, written.Seq, o.settings)
	}
	if out.Result != nil {
		o.unsettled = p.through
		err := o.publishFinals(ctx, em, p, out.Result)
		if err != nil && !errors.Is(err, kvstore.ErrLeaseLost) && ctx.Err() == nil {
			o.log.Warn().Err(err).Msg("final events of a committed turn; retrying")
			err = o.keepPromise(ctx, func(ctx context.Context) error { return o.finishRecord(ctx, rec) })
		}
		if err != nil {
			return err
		}
		o.unsettled = 0
	}
	o.w.transcripts.markSettled(o.token, written.Seq, reconnects)
	o.checked = rec.InboundSeq // its finals are stored: a later drain need not look
	for _, c := range p.backlog {
		o.announceSteered(ctx, c, em.run)
	}
	if len(o.done) >= o.w.deleteEvery() {
		// Processed messages count against the lane's cap: a long drain
		// must not leave its sender refused by messages already answered.
		o.deleteProcessed(ctx, true)
	}
	return nil
}

// deleteEvery is how many processed messages an owner keeps while it
// drains before it deletes them together: an eighth of the lane's cap,
// from 1 to 16.
func (w *Worker) deleteEvery() int {
	c := w.streams.LaneCap()
	if c <= 0 {
		return 16
	}
	return int(min(max(c/8, 1), 16))
}

// nextState is the session's state after a turn whose outcome is out,
// from its state before (nil = none): the profile that answered it, if
// any, becomes the sticky one, and its usage adds to the running total.
// An outcome that adds to the transcript replaces the calls waiting for
// approval with those its result leaves pending (none without a result):
// approvals name calls at the end of the transcript, so they change
// exactly when it does. An outcome that changes none of these leaves the
// state as it was.
func nextState(prev *events.SessionState, out *Outcome) *events.SessionState {
	var approvals []events.ApprovalCall
	if out.Result != nil {
		approvals = events.ApprovalCalls(out.Result.Meta.PendingToolCalls)
	}
	replace := len(out.Entries) > 0 && (len(approvals) > 0 || (prev != nil && len(prev.Approvals) > 0))
	if out.Usage == nil && out.AuthProfile == "" && !replace {
		return prev
	}
	var next events.SessionState
	if prev != nil {
		next = *prev
	}
	if replace {
		next.Approvals = approvals
	}
	if out.AuthProfile != "" {
		next.AuthProfile = out.AuthProfile
	}
	if out.Usage != nil {
		next.Usage = next.Usage.Plus(out.Usage)
		next.Turns++
	}
	return &next
}

// publishFinals publishes the final events a committed turn owes: its run's,
// then those of the messages it consumed, in sequence order.
func (o *owner) publishFinals(ctx context.Context, em *emitter, p *plan, res *events.Result) error {
	if err := em.final(ctx, res); err != nil {
		return err
	}
	for _, c := range res.Meta.Consumed {
		if err := o.endConsumed(ctx, c, em.run, p.jsonOf(c.RunID)); err != nil {
			return err
		}
	}
	return nil
}

// Retry delays of a committed turn's final events.
const (
	promiseRetryFirst = 100 * time.Millisecond
	promiseRetryMax   = 5 * time.Second
)

// keepPromise calls settle, which publishes the final events a committed
// turn owes, until it succeeds, with a growing delay (bounded by
// promiseRetryMax) while the lease and the trigger are kept alive. It gives
// up only when the lane is lost (ErrLeaseLost), ctx ends, or the worker
// stops (errStopping): the lane is then handed over and its next owner
// publishes what is missing. A turn record that does not decode
// (kvstore.ErrCorrupt) can never tell its finals: that is logged once and
// the lane goes on, rather than retrying forever.
func (o *owner) keepPromise(ctx context.Context, settle func(context.Context) error) error {
	delay := promiseRetryFirst
	for {
		err := settle(ctx)
		switch {
		case err == nil, errors.Is(err, kvstore.ErrLeaseLost):
			return err
		case errors.Is(err, kvstore.ErrCorrupt):
			o.log.Error().Err(err).Msg("a committed turn's record does not decode: its final events cannot be published")
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		o.log.Warn().Err(err).Dur("retry_in_ms", delay).Msg("a committed turn's final events are not stored yet")
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		case <-o.w.stopCh:
			return errStopping
		}
		delay = min(2*delay, promiseRetryMax)
	}
}

// newEmitter returns the emitter of one of the lane's runs, for the current
// drain: it stops publishing when ctx ends, and a newer owner fencing its
// events ends the drain with ErrLeaseLost.
func (o *owner) newEmitter(ctx context.Context, run string, log zerolog.Logger, asJSON bool) *emitter {
	window := wideWindow
	if o.w.streams.cfg.Replicas > 1 {
		window = 1
	}
	lose := o.cancel
	return &emitter{js: o.w.js, events: o.w.streams.Events, key: o.key, run: run, log: log, asJSON: asJSON,
		subject: events.EventPrefix + o.token + "." + run, window: window, done: ctx.Done(),
		lost: func(err error) {
			if lose != nil {
				lose(err)
			}
		}}
}

func isJSON(raw *jetstream.RawStreamMsg) bool {
	return events.IsJSON(raw.Header.Get(events.HeaderContentType), raw.Data)
}

// setUpDone gives back the owner's place in the set-up gate, once.
func (o *owner) setUpDone() {
	if o.setUp != nil {
		o.setUp()
	}
}

func (o *owner) callHandler(ctx context.Context, t *Turn, log zerolog.Logger) (out *Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("handler panicked")
			err = fmt.Errorf("lanes: handler panicked: %v", p)
		}
	}()
	o.setUpDone()
	out, err = o.w.handler.HandleTurn(log.WithContext(ctx), t)
	if err == nil && out == nil {
		err = errors.New("lanes: handler returned no outcome")
	}
	return out, err
}

// failTurn ends a run the handler never saw with an error event and commits
// it (no entries) so the lane moves on.
func (o *owner) failTurn(ctx context.Context, em *emitter, p *plan, kind, msg string, attempt int) error {
	em.emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseError, Error: msg, EndedAt: time.Now().UnixMilli(), Attempt: attempt})
	res := &events.Result{Payloads: []events.Payload{{Text: msg, IsError: true}},
		Meta: events.Meta{Error: &events.RunError{Kind: kind, Message: msg}}}
	return o.commit(ctx, em, p, &Outcome{Result: res})
}

// settleRecord publishes the final events the lane's record of seq owes.
func (o *owner) settleRecord(ctx context.Context, seq uint64) error {
	rec, ok, err := o.w.lanes.Record(ctx, o.token, seq)
	if err != nil || !ok {
		return err
	}
	return o.finishRecord(ctx, rec)
}

// finishRecord publishes the final events a committed record owes and that
// are not stored yet: its run's, then those of the messages it consumed.
// Each run is claimed first (see FenceToken), so no earlier owner can
// publish after the check that finds its final event missing.
func (o *owner) finishRecord(ctx context.Context, rec kvstore.Record) error {
	if len(rec.Final) == 0 {
		return nil // a no-op turn: no final event
	}
	ev, err := events.DecodeEvent(events.ContentMsgpack, rec.Final)
	if err != nil || ev.Data.Result == nil {
		o.log.Error().Err(err).Uint64("seq", rec.InboundSeq).Msg("a committed turn's final event is unreadable; it cannot be published")
		return nil
	}
	run := rec.RunID
	if run == "" {
		run = strconv.FormatUint(rec.InboundSeq, 10)
	}
	em := o.newEmitter(ctx, run, o.log.With().Str("run_id", run).Logger(), false)
	st, err := em.open(ctx, o.lease.Revision())
	if err != nil {
		return err
	}
	if !st.finished {
		if err := em.final(ctx, ev.Data.Result); err != nil {
			return err
		}
	}
	for _, c := range ev.Data.Result.Meta.Consumed {
		if err := o.endConsumed(ctx, c, run, false); err != nil {
			return err
		}
	}
	return nil
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
	keep := o.done[:0]
	var del []uint64
	for _, seq := range o.done {
		switch {
		case keepTrigger && o.trigger != nil && seq == o.triggerSeq, seq == o.unsettled:
			keep = append(keep, seq)
		default:
			del = append(del, seq)
		}
	}
	o.done = keep
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
	o.hold(false) // before the release: see hold
	if err := o.lease.Release(ctx); err != nil {
		// The trigger comes back soon; whoever gets it takes the lane once
		// the lease is free (released after all, or expired).
		o.log.Warn().Err(err).Msg("release lease")
		return endRetry
	}
	o.w.stats.Released.Add(1)
	// Re-check on the leader after releasing: a message stored before a
	// follower saw our lease is found here or by the next owner.
	_, err := o.next(ctx, o.cursor.Seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return endDone
	case err != nil:
		o.log.Warn().Err(err).Msg("re-check lane")
		return endRetry
	}
	if o.w.stopping.Load() {
		return endStopping
	}
	lease, err := o.w.lanes.Acquire(ctx, o.token, kvstore.LeaseInfo{Worker: o.w.cfg.ID, Acquired: time.Now().UnixMilli(), Trigger: o.triggerSeq})
	switch {
	case err == nil:
		o.lease = lease
		o.w.stats.Acquired.Add(1)
		o.hold(true)
		return endAgain
	case errors.Is(err, kvstore.ErrHeld):
		return endDone
	}
	o.log.Warn().Err(err).Msg("re-acquire lease")
	return endRetry
}
