package lanes

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// duplicate ends the run of a message whose id an earlier message of the
// lane used within the de-duplication window: nothing runs, and its run
// points at that message's, as a merged message's does (a client's Wait
// returns that run's result).
func (o *owner) duplicate(ctx context.Context, em *fenced.Emitter, p *plan) error {
	into := strconv.FormatUint(p.run.dupOf, 10)
	o.stats.Duplicates.Add(1)
	o.log.Info().Uint64("seq", p.run.raw.Sequence).Str("duplicates", into).Msg("a message reused the id of an earlier message of its session: not run")
	em.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseMerged, Text: into})
	return o.commit(ctx, em, p, &Outcome{Result: &events.Result{Meta: events.Meta{MergedInto: into}}})
}

// endConsumed ends the run of a message a turn consumed without running it
// (merged, steered, dropped, or a settings message applied on the way): a
// lifecycle event saying why, then its final event, continuing whatever that
// run published before. A run that already has its final event is left
// alone, so it can be called again after a failure or by the lane's next
// owner after a crash.
func (o *owner) endConsumed(ctx context.Context, c events.ConsumedRun, into string, asJSON bool) error {
	em := o.newEmitter(ctx, c.RunID, o.log.With().Str("run_id", c.RunID).Logger(), asJSON)
	st, err := em.Open(ctx, o.lease.Revision())
	if err != nil || st.Finished {
		return err
	}
	seq, _ := strconv.ParseUint(c.RunID, 10, 64)
	if _, _, err := o.closeAttempt(ctx, em, st, seq); err != nil {
		return err
	}
	why := events.EventData{Phase: events.PhaseMerged, Text: into}
	var res *events.Result
	switch c.Kind {
	case "":
		o.stats.Merged.Add(1)
		res = &events.Result{Meta: events.Meta{MergedInto: into}}
	case kindSettings:
		res = &events.Result{Payloads: []events.Payload{{Text: c.Reason}}}
		why = runEnding(res, c.Reason)
	default:
		o.stats.Dropped.Add(1)
		res = &events.Result{Payloads: []events.Payload{{Text: c.Reason, IsError: true}},
			Meta: events.Meta{Aborted: c.Kind == events.KindInterrupted, Error: &events.RunError{Kind: c.Kind, Message: c.Reason}}}
		why = runEnding(res, "")
	}
	if st.LastPhase != why.Phase {
		o.endRun(em, 0, why) // not again when a failed try stored it
	}
	return em.Final(ctx, res)
}

// announceSteered tells the sender of a steer-backlog message that a running
// turn saw it; the message still runs as its own turn.
func (o *owner) announceSteered(ctx context.Context, c collected, into string) {
	em := o.newEmitter(ctx, c.runID(), o.log, isJSON(c.raw))
	st, err := em.Open(ctx, o.lease.Revision())
	if err == nil && !st.Finished {
		err = em.Publish(ctx, events.StreamLifecycle, events.EventData{Phase: events.PhaseSteered, Text: into}, st.Attempt)
	}
	if err != nil {
		o.log.Debug().Err(err).Str("run_id", c.runID()).Msg("steered event")
	}
}

// commit writes the turn's record (fenced), which moves the cursor past
// every message the turn consumed. The record is a promise: the turn's run
// gets its final event, then the runs of the messages the turn consumed
// without running them get theirs, and the owner retries until they are
// stored before it takes the next message or releases the lane.
func (o *owner) commit(ctx context.Context, em *fenced.Emitter, p *plan, out *Outcome) error {
	rec, err := o.record(em, p, out)
	if err != nil {
		return err
	}
	reconnects := o.nc.Stats().Reconnects // before the finals: a reconnect after them may have lost them
	written, err := o.lease.PutRecord(ctx, rec)
	if err != nil {
		// The record may be stored all the same (its answer lost): the
		// lane's cursor is not known for certain until it is read again.
		o.lane.left = nil
		if kvstore.Transient(err) {
			return &storeFailure{err}
		}
		return err
	}
	o.inFlight = nil // the turn is committed: its attempts no longer matter
	if o.cfg.Index != nil {
		o.cfg.Index.Touch(Activity{Key: o.key, Run: em.RunID(), Committed: true, Through: p.through, State: rec.State})
	}
	o.advance(p, rec, written)
	if out.Result != nil {
		if err := o.publishCommitted(ctx, em, p, rec, out.Result); err != nil {
			return err
		}
	}
	o.transcripts.markFinalsStored(o.token, written.Seq, reconnects)
	o.lane.checked = rec.InboundSeq // its finals are stored: a later drain need not look
	for _, c := range p.backlog {
		o.announceSteered(ctx, c, em.RunID())
	}
	if len(o.lane.processed) >= o.deleteEvery() {
		// Processed messages count against the lane's cap: a long drain
		// must not leave its sender refused by messages already answered.
		o.deleteProcessed(ctx, true)
	}
	return nil
}

// record is the turn's record: what the turn adds to the transcript, the
// session's state after it, the completion it owes a parent (lineage), and
// its final event. The session's state rides on every record: the newest
// one's is the session's, whatever kind of turn wrote it.
func (o *owner) record(em *fenced.Emitter, p *plan, out *Outcome) (kvstore.Record, error) {
	if out.Result != nil {
		out.Result.Meta.Consumed = p.consumed()
	}
	state, outbox, err := o.lineage(nextState(o.lane.cursor.State, out), p, out)
	if err != nil {
		return kvstore.Record{}, err
	}
	session := o.lane.cursor.SessionID
	if out.Reset {
		session = sessionfile.NewSessionID()
	}
	rec := kvstore.Record{InboundSeq: p.through, RunID: em.RunID(), SessionID: session, Reset: out.Reset, Entries: out.Entries, State: state,
		IDs: o.lane.ids.Recent(p.through, p.newest()), Outbox: outbox}
	if !out.Reset {
		rec.Start = o.lane.cursor.Start
	}
	if out.Result != nil {
		if state != o.lane.cursor.State {
			out.Result.Meta.Session = state
		}
		if rec.Final, _, err = events.EncodeEvent(&events.Event{Stream: events.StreamFinal, Data: events.EventData{Result: out.Result}}, false); err != nil {
			return kvstore.Record{}, err
		}
	}
	return rec, nil
}

// advance moves what the owner knows of the lane past the turn committed
// as rec (stored as written): the cursor, the messages it processed, its
// attempts (forgotten), and the transcript.
func (o *owner) advance(p *plan, rec kvstore.Record, written kvstore.Written) {
	o.lane.cursor.Seq, o.lane.cursor.Stored, o.lane.cursor.State, o.lane.cursor.SessionID = p.through, written.Seq, rec.State, rec.SessionID
	if rec.Reset {
		o.lane.cursor.Start = written.Seq
	}
	if o.lane.left != nil {
		// What Cursor reads back from rec (kvstore.Lanes.Cursor).
		o.lane.cursor.IDs = rec.IDs
		c := o.lane.cursor
		o.lane.left = &c
	}
	o.lane.processed = append(o.lane.processed, p.run.raw.Sequence)
	for _, c := range p.merged {
		o.lane.processed = append(o.lane.processed, c.raw.Sequence)
	}
	for _, d := range p.dropped {
		o.lane.processed = append(o.lane.processed, d.c.raw.Sequence)
	}
	clear(o.failures)
	if o.lane.tx != nil {
		o.lane.tx = o.transcripts.committed(o.lane.tx, rec, written)
		o.transcripts.noteSettings(o.token, written.Seq, o.lane.settings)
	}
}

// publishCommitted keeps the promise of the committed turn rec, whose
// result is res: the completion it owes a parent, then its final events
// (publishFinals), retried (keepPromise) until they are stored. The turn is
// owed until then (laneState.owed).
func (o *owner) publishCommitted(ctx context.Context, em *fenced.Emitter, p *plan, rec kvstore.Record, res *events.Result) error {
	o.lane.owed = p.through
	err := o.w.deliver(ctx, rec.Outbox)
	if err == nil {
		err = o.publishFinals(ctx, em, p, res)
	}
	if err != nil && !errors.Is(err, kvstore.ErrLeaseLost) && ctx.Err() == nil {
		o.log.Warn().Err(err).Msg("final events of a committed turn; retrying")
		err = o.keepPromise(ctx, func(ctx context.Context) error { return o.publishRecordFinals(ctx, rec) })
	}
	if err != nil {
		return err
	}
	o.lane.owed = 0
	return nil
}

// deleteEvery is how many processed messages an owner keeps while it
// drains before it deletes them together: an eighth of the lane's cap,
// from 1 to 16.
func (o *owner) deleteEvery() int {
	c := o.streams.LaneCap()
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
	replace := (out.Reset || len(out.Entries) > 0) && (len(approvals) > 0 || (prev != nil && len(prev.Approvals) > 0))
	dropProfile := out.Reset && prev != nil && prev.AuthProfile != ""
	if out.Usage == nil && out.AuthProfile == "" && !replace && !dropProfile {
		return prev
	}
	var next events.SessionState
	if prev != nil {
		next = *prev
	}
	if out.Reset {
		next.AuthProfile = ""
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
func (o *owner) publishFinals(ctx context.Context, em *fenced.Emitter, p *plan, res *events.Result) error {
	if err := em.Final(ctx, res); err != nil {
		return err
	}
	for _, c := range res.Meta.Consumed {
		if err := o.endConsumed(ctx, c, em.RunID(), p.jsonOf(c.RunID)); err != nil {
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

// keepPromise calls publish, which publishes the final events a committed
// turn owes, until it succeeds, with a growing delay (bounded by
// promiseRetryMax) while the lease and the trigger are kept alive. It gives
// up only when the lane is lost (ErrLeaseLost), ctx ends, or the worker
// shuts down (errShuttingDown): the lane is then handed over and its next owner
// publishes what is missing. A turn record that does not decode
// (kvstore.ErrCorrupt) can never tell its finals: that is logged once and
// the lane goes on, rather than retrying forever.
func (o *owner) keepPromise(ctx context.Context, publish func(context.Context) error) error {
	retry := backoff.Policy{Base: promiseRetryFirst, Max: promiseRetryMax}
	for n := 1; ; n++ {
		err := publish(ctx)
		switch {
		case err == nil, errors.Is(err, kvstore.ErrLeaseLost):
			return err
		case errors.Is(err, kvstore.ErrCorrupt):
			o.log.Error().Err(err).Msg("a committed turn's record does not decode: its final events cannot be published")
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		delay := retry.Delay(n)
		o.log.Warn().Err(err).Dur("retry_in_ms", delay).Msg("a committed turn's final events are not stored yet")
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		case <-o.shutdown:
			return errShuttingDown
		}
	}
}

// failTurn ends a run the handler never saw with an error event and commits
// it (no entries) so the lane moves on.
func (o *owner) failTurn(ctx context.Context, em *fenced.Emitter, p *plan, kind, msg string, attempt int) error {
	res := &events.Result{Payloads: []events.Payload{{Text: msg, IsError: true}},
		Meta: events.Meta{Error: &events.RunError{Kind: kind, Message: msg}}}
	o.endRun(em, attempt, runEnding(res, ""))
	return o.commit(ctx, em, p, &Outcome{Result: res})
}

// runEnding is the lifecycle event that ends a run whose turn ended with res:
// an error event saying what res's error reply says (events.Result.ErrorText)
// when res carries an error, else an end event carrying text (a command's
// reply, a notice; "" for a model's reply, which only the final event
// carries).
func runEnding(res *events.Result, text string) events.EventData {
	if res.Meta.Error != nil {
		return events.EventData{Phase: events.PhaseError, Error: res.ErrorText()}
	}
	return events.EventData{Phase: events.PhaseEnd, Text: text}
}

// endRun publishes the lifecycle event that ends a run's attempt (see
// ending; a consumed run's merged event too): an end or error event is
// stamped with the time, an error event with its attempt (0: none). The
// lane is the only publisher of these events (Turn.Emit drops a
// handler's), so every run has exactly one of them before its final event.
func (o *owner) endRun(em *fenced.Emitter, attempt int, data events.EventData) {
	switch data.Phase {
	case events.PhaseError:
		data.Attempt = attempt
		fallthrough
	case events.PhaseEnd:
		data.EndedAt = o.now().UnixMilli()
	}
	em.Emit(events.StreamLifecycle, data)
}

// publishOwed publishes the final events the lane's record of seq owes.
func (o *owner) publishOwed(ctx context.Context, seq uint64) error {
	rec, ok, err := o.store.Record(ctx, o.token, seq)
	if err != nil || !ok {
		return err
	}
	return o.publishRecordFinals(ctx, rec)
}

// publishRecordFinals publishes the final events a committed record owes and that
// are not stored yet: its run's, then those of the messages it consumed.
// Each run is claimed first (see FenceToken), so no earlier owner can
// publish after the check that finds its final event missing.
func (o *owner) publishRecordFinals(ctx context.Context, rec kvstore.Record) error {
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
	st, err := em.Open(ctx, o.lease.Revision())
	if err != nil {
		return err
	}
	if !st.Finished {
		// The completion the turn owes goes before its final event: a run
		// with its final event has delivered it.
		if err := o.w.deliver(ctx, rec.Outbox); err != nil {
			return err
		}
		if err := em.Final(ctx, ev.Data.Result); err != nil {
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
