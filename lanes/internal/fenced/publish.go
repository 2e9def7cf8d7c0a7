package fenced

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/kvstore"
)

// Final waits for the run's events to be stored, then publishes the final
// event synchronously. It is published at most once per run: a retry by
// another Emitter (the owner's next try, or the lane's next owner) claims
// the run first, which makes the server refuse a try still on its way, and
// then finds a try already stored (see the lanes owner's publishRecordFinals). The message id
// (per claim) makes a re-send of the same try a duplicate too.
func (e *Emitter) Final(ctx context.Context, res *events.Result) error {
	if err := e.AwaitAcks(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	attempt := e.attempt
	e.mu.Unlock()
	if err := e.Publish(ctx, events.StreamFinal, events.EventData{Result: res}, attempt); err != nil {
		return fmt.Errorf("lanes: publish final event: %w", err)
	}
	return nil
}

// finalMsgIDLocked is the message id of a run's final event under the
// current claim.
func (e *Emitter) finalMsgIDLocked() string {
	return "final:" + e.subject + ":" + strconv.FormatUint(e.fence, 10)
}

// Abort ends the current attempt on record: its events are stored, then an
// Aborted event, so the next attempt's events follow it.
func (e *Emitter) Abort(ctx context.Context, why string) error {
	if err := e.AwaitAcks(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	attempt := e.attempt
	e.mu.Unlock()
	return e.Aborted(ctx, attempt, why)
}

// Aborted publishes the aborted event that ends attempt (see abort).
func (e *Emitter) Aborted(ctx context.Context, attempt int, why string) error {
	return e.Publish(ctx, events.StreamLifecycle, events.EventData{Phase: events.PhaseAborted, Error: why,
		EndedAt: e.now().UnixMilli(), Attempt: attempt}, attempt)
}

// Start starts an attempt: it publishes its first event synchronously, so
// the attempt is on record before any work.
func (e *Emitter) Start(ctx context.Context, data events.EventData, attempt int) error {
	data.Attempt = attempt
	return e.Publish(ctx, events.StreamLifecycle, data, attempt)
}

// Publish publishes one event synchronously, after every event before it,
// as part of attempt. A write that met another in flight is retried; a
// fence that moved on is checked (ErrLeaseLost when a newer owner has it).
func (e *Emitter) Publish(ctx context.Context, stream string, data events.EventData, attempt int) error {
	if err := e.AwaitAcks(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	silent := e.fence != 0 && e.now().Sub(e.lastAck) > ProbeAfter
	e.mu.Unlock()
	if silent {
		if err := e.checkFence(ctx); err != nil {
			return err
		}
	}
	e.mu.Lock()
	e.attempt = attempt
	ev := e.newEvent(stream, data)
	e.mu.Unlock()
	m, err := e.encode(ev)
	if err != nil {
		return fmt.Errorf("lanes: encode event: %w", err)
	}
	for try := 0; ; try++ {
		e.mu.Lock()
		if e.fenced != nil {
			err := e.fenced
			e.mu.Unlock()
			return err
		}
		if e.fence == 0 {
			e.mu.Unlock()
			return fmt.Errorf("lanes: %s event of run %s published before the run was claimed", stream, e.run)
		}
		e.setFenceLocked(m)
		if ev.Terminal() {
			m.Header.Set(events.HeaderMsgID, e.finalMsgIDLocked())
		}
		e.mu.Unlock()
		_, err := e.js.PublishMsg(ctx, m)
		if err == nil {
			e.mu.Lock()
			e.lastAck = e.now()
			e.mu.Unlock()
			return nil
		}
		busy, mismatch := kvstore.WriteConflict(err)
		if (!busy && !mismatch) || try >= maxRetries {
			return fmt.Errorf("lanes: publish %s event: %w", stream, err)
		}
		if busy {
			err = pause(ctx, try)
		} else {
			err = e.recheck(ctx)
		}
		if err != nil {
			return err
		}
	}
}

// conflictRetry is the wait before each retry of a conflicting write: a
// little longer every time, never long.
var conflictRetry = backoff.Policy{Base: 2 * time.Millisecond, Max: 50 * time.Millisecond, Linear: true}

// pause waits before retry try+1 of a conflicting write.
func pause(ctx context.Context, try int) error { return conflictRetry.Wait(ctx, try+1) }
