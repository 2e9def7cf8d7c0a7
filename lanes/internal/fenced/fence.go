package fenced

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// Token ends the subject of a run's fence markers,
// agent.ev.<lane>.<run>.fence, in the event stream next to the run's
// events. An owner about to publish a run's events first stores a marker
// there naming its lease revision (compare-and-swap on that subject, never
// over a newer owner's marker); every event it publishes then carries the
// expectation that the marker is still the subject's last message. Once
// the lane's next owner stores its marker, the server refuses every event
// of the older owner: a viewer, raw subscribers too, never sees an older
// attempt's event after a newer one began. Markers carry the header
// Lanefleet-Stream: fence, the decimal lease revision as payload and the
// header Lanefleet-Claim naming the claim (one per attempt: an owner that
// retries a run under the same lease claims it again, and the server then
// refuses every event of the failed attempt too); they are not events (a
// viewer of one run subscribes to exactly agent.ev.<lane>.<run>).
const Token = "fence"

// MarkerStream is the Lanefleet-Stream header of fence markers.
const MarkerStream = "fence"

// claimHeader names the claim a fence marker stores (Emitter.claimID).
const claimHeader = "Lanefleet-Claim"

// ErrSuperseded halts the Emitter of an attempt that is over: its owner
// retries the run (or publishes what its record owes) under the same lease with a newer claim,
// or ended the attempt (Emitter.retire). It is not ErrLeaseLost: the owner
// still holds the lane.
var ErrSuperseded = errors.New("lanes: a newer attempt at the run took its events over")

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (e *Emitter) FenceSubject() string { return e.subject + "." + Token }

// fencedError is the error of an owner whose events a newer owner fenced.
func fencedError(run string, theirs, ours uint64) error {
	return fmt.Errorf("%w: the events of run %s are fenced by a newer owner (lease revision %d, ours %d)",
		kvstore.ErrLeaseLost, run, theirs, ours)
}

// Open claims the run's events for the owner holding lease revision rev
// and reads what earlier attempts left (the sequence continues after their
// last event). A run nobody claimed before has no events, and nothing is
// read; otherwise its last event is read once the marker fences every
// earlier owner, so nothing such an owner publishes is missed.
// ErrLeaseLost means a newer owner has claimed the run.
//
// Every owner claims a run before it publishes, so a run without a marker
// has no events, with one exception: a full event stream drops its oldest
// messages, the marker (a run's first) before the run's later events. A
// run re-run after that starts its events over at sequence 1; its viewers
// still get every event past what they saw, and its final.
func (e *Emitter) Open(ctx context.Context, rev uint64) (RunState, error) {
	fresh, err := e.Claim(ctx, rev)
	if err != nil {
		return RunState{}, err
	}
	var st RunState
	if !fresh {
		if st, err = e.readLast(ctx); err != nil {
			return RunState{}, err
		}
	}
	e.mu.Lock()
	e.seq, e.attempt = st.Seq, st.Attempt
	if st.Seq > 0 {
		e.asJSON = st.JSON
	}
	e.mu.Unlock()
	return st, nil
}

// Claim stores this owner's fence marker on the run. The first try expects
// no marker (a new run); a refusal reads the marker there and writes over it
// unless it names a newer lease. fresh reports that no marker existed.
func (e *Emitter) Claim(ctx context.Context, rev uint64) (fresh bool, err error) {
	return e.claimAs(ctx, rev, true)
}

// claimAs is claim; first says this is the emitter's first claim (its
// attempt opens): it writes over a marker of another claim under the same
// lease (the owner's earlier attempt). A claim again (first false: this
// emitter's marker is gone) halts at one instead (ErrSuperseded): a newer
// attempt of the owner's has the run.
func (e *Emitter) claimAs(ctx context.Context, rev uint64, first bool) (fresh bool, err error) {
	subj := e.FenceSubject()
	e.mu.Lock()
	if e.claimID == "" {
		e.claimID = randomHex(8)
	}
	id := e.claimID
	e.mu.Unlock()
	expect := uint64(0)
	for try := 0; ; try++ {
		m := nats.NewMsg(subj)
		m.Data = strconv.AppendUint(nil, rev, 10)
		m.Header.Set(events.HeaderStream, MarkerStream)
		m.Header.Set(claimHeader, id)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
		ack, err := e.js.PublishMsg(ctx, m)
		if err == nil {
			e.mu.Lock()
			e.fence, e.rev, e.lastAck = ack.Sequence, rev, e.now()
			e.mu.Unlock()
			return expect == 0, nil
		}
		busy, mismatch := kvstore.WriteConflict(err)
		if (!busy && !mismatch) || try >= maxRetries {
			return false, fmt.Errorf("lanes: fence the events of run %s: %w", e.run, err)
		}
		if busy {
			if err := pause(ctx, try); err != nil {
				return false, err
			}
			continue
		}
		raw, gerr := e.events.GetLastMsgForSubject(ctx, subj)
		switch {
		case errors.Is(gerr, jetstream.ErrMsgNotFound):
			expect = 0
		case gerr != nil:
			return false, fmt.Errorf("lanes: fence of run %s: %w", e.run, gerr)
		default:
			switch e.judge(raw, rev) {
			case markerNewerOwner:
				return false, fencedError(e.run, markerRev(raw.Data), rev)
			case markerOurs:
				if !first {
					// Our write was stored; its answer was lost.
					e.mu.Lock()
					e.fence, e.rev, e.lastAck = raw.Sequence, rev, e.now()
					e.mu.Unlock()
					return false, nil
				}
			case markerNewerClaim:
				if !first {
					return false, ErrSuperseded
				}
			}
			expect = raw.Sequence
		}
	}
}

func markerRev(data []byte) uint64 {
	rev, _ := strconv.ParseUint(string(data), 10, 64)
	return rev
}

// marker is whose a run's fence marker is, as one Emitter sees it.
type marker uint8

const (
	// markerOurs: the emitter's own claim.
	markerOurs marker = iota
	// markerNewerOwner: a newer lease's: the lane's next owner has the run.
	markerNewerOwner
	// markerNewerClaim: another claim under the emitter's own lease
	// revision: the owner's next attempt at the run (an owner opens its
	// attempts one after another, so the other claim is the newer one).
	markerNewerClaim
	// markerOlder: an older lease's, left by an earlier owner.
	markerOlder
)

// judge says whose marker raw is, for an Emitter claiming under lease
// revision rev.
func (e *Emitter) judge(raw *jetstream.RawStreamMsg, rev uint64) marker {
	e.mu.Lock()
	id, fence := e.claimID, e.fence
	e.mu.Unlock()
	theirs := markerRev(raw.Data)
	switch {
	case theirs > rev:
		return markerNewerOwner
	case theirs < rev:
		return markerOlder
	case (id != "" && raw.Header.Get(claimHeader) == id) || (fence != 0 && raw.Sequence == fence):
		return markerOurs
	}
	return markerNewerClaim
}

// recheck finds out why a write was refused for its fence: a newer owner's
// marker (the Emitter halts: ErrLeaseLost), a newer claim of the owner's own
// (its next attempt at the run: the Emitter halts without a word,
// ErrSuperseded), or a marker of ours that is no longer the subject's last
// (the write carried an older one, or the stream's limits removed it): then
// the run is claimed again if needed and the write is retried.
func (e *Emitter) recheck(ctx context.Context) error {
	e.mu.Lock()
	rev := e.rev
	e.mu.Unlock()
	raw, err := e.events.GetLastMsgForSubject(ctx, e.FenceSubject())
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return nil // unknown: the retry asks the server again
	default:
		switch e.judge(raw, rev) {
		case markerNewerOwner:
			err := fencedError(e.run, markerRev(raw.Data), rev)
			e.halt(err)
			return err
		case markerNewerClaim:
			e.Retire()
			return ErrSuperseded
		case markerOurs:
			// Ours is the last: the refused write carried an older one,
			// or our claim's answer was lost.
			e.mu.Lock()
			e.fence = raw.Sequence
			e.mu.Unlock()
			return nil
		}
	}
	_, err = e.claimAs(ctx, rev, false)
	switch {
	case errors.Is(err, kvstore.ErrLeaseLost):
		e.halt(err)
	case errors.Is(err, ErrSuperseded):
		e.Retire()
	}
	return err
}

// halt ends publishing for good: queued events and the pending frame are
// dropped and the owner is told the lane is lost.
func (e *Emitter) halt(err error) {
	e.mu.Lock()
	first := e.fenced == nil
	if first {
		e.fenced = err
		e.dropLocked()
	}
	e.mu.Unlock()
	if first {
		e.log.Warn().Err(err).Msg("a newer owner fenced this run's events: stopping")
		if e.lost != nil {
			e.lost(err)
		}
	}
}

// Retire ends publishing for good without a word to the owner: the
// attempt is over (the owner retries the run, or publishes what its record owes, with another
// Emitter), so whatever its handler still emits is dropped, and events in
// flight that the server refuses are not tried again.
func (e *Emitter) Retire() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fenced == nil {
		e.fenced = ErrSuperseded
		e.dropLocked()
	}
}

// checkFence reads the run's fence after a silence and halts the emitter
// (ErrLeaseLost) if a newer owner has claimed the run. A failed read says
// nothing: the next write finds out.
func (e *Emitter) checkFence(ctx context.Context) error {
	e.mu.Lock()
	rev := e.rev
	e.mu.Unlock()
	raw, err := e.events.GetLastMsgForSubject(ctx, e.FenceSubject())
	if err != nil {
		return nil
	}
	switch e.judge(raw, rev) {
	case markerNewerOwner:
		err = fencedError(e.run, markerRev(raw.Data), rev)
		e.halt(err)
		return err
	case markerNewerClaim:
		e.Retire()
		return ErrSuperseded
	}
	return nil
}

// RunState is what a run's earlier attempts left in the event stream.
type RunState struct {
	Seq       uint64 // the last event's sequence; 0 = none
	Attempt   int    // the last attempt that published an event; 0 = none
	LastPhase string // the lifecycle phase of the last event, if it is one
	// LastError is the last event's error when it is an aborted event:
	// why the run's last attempt ended without finishing.
	LastError string
	Finished  bool // the run has its final event
	JSON      bool // the last event is JSON: the run's viewer asked for JSON
}

// readLast reads the run's last event and reports what it says.
func (e *Emitter) readLast(ctx context.Context) (RunState, error) {
	raw, err := e.events.GetLastMsgForSubject(ctx, e.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return RunState{}, nil
	}
	if err != nil {
		return RunState{}, fmt.Errorf("lanes: last event of run %s: %w", e.run, err)
	}
	ct := raw.Header.Get(events.HeaderContentType)
	ev, err := events.DecodeEvent(ct, raw.Data)
	if err != nil {
		// An undecodable last event: continue after its stream position.
		return RunState{Seq: raw.Sequence, Attempt: 1}, nil
	}
	st := RunState{Seq: ev.Seq, Attempt: ev.Attempt, Finished: ev.Terminal(), JSON: ct == events.ContentJSON}
	if ev.Stream == events.StreamLifecycle {
		st.LastPhase = ev.Data.Phase
		if st.LastPhase == events.PhaseAborted {
			st.LastError = ev.Data.Error
		}
	}
	return st, nil
}
