package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
)

// Turn is one inbound message being processed by its lane's owner. The
// handler reads the message and the session's history from it and streams
// events through Emit; it returns the entries to append and the result, which
// the lane commits (fenced), publishes as the final event and only then marks
// done.
type Turn struct {
	SessionKey string
	Token      string
	SessionID  string // pi session id of the lane's transcript
	RunID      string // the inbound stream sequence, in decimal
	Seq        uint64 // inbound stream sequence
	Attempt    int    // 1 on the first try; more after a crash or retry
	Worker     string
	Inbound    *events.Inbound
	History    []message.Entry // the session so far; do not modify
	Received   time.Time
	// Header is the inbound message's headers (its trace context); do not
	// modify.
	Header nats.Header

	em    *emitter
	steer func(ctx context.Context) []*events.Inbound
}

// Steer returns the steer-mode messages that reached the lane, right behind
// this turn, since the last call, and makes them part of this turn: they are
// committed with it and their runs end pointing at it. Steer-backlog
// messages are returned too, but stay on the lane and run afterwards as
// their own turns. A handler that never calls Steer leaves them all to run
// as follow-ups.
func (t *Turn) Steer(ctx context.Context) []*events.Inbound {
	if t.steer == nil {
		return nil
	}
	return t.steer(ctx)
}

// Emit publishes an event of the run. Assistant and thinking deltas are
// coalesced into frames: a delta after a quiet spell goes out at once, and
// the deltas that follow it within frameWindow (or up to frameMaxBytes) go
// out together, so a viewer waits at most frameWindow for any delta while a
// fast model costs a few hundred events per second. Every other event
// flushes the pending frame first. Publishing is asynchronous: a lost event
// never fails the turn.
func (t *Turn) Emit(stream string, data events.EventData) { t.em.emit(stream, data) }

// Outcome is what a handler returns for a completed turn. An empty Outcome
// writes nothing but the cursor (a no-op turn).
type Outcome struct {
	Entries []message.Entry // appended to the transcript
	Result  *events.Result  // published as the run's final event
}

// Handler runs turns.
type Handler interface {
	HandleTurn(ctx context.Context, t *Turn) (*Outcome, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t *Turn) (*Outcome, error)

// HandleTurn calls f.
func (f HandlerFunc) HandleTurn(ctx context.Context, t *Turn) (*Outcome, error) { return f(ctx, t) }

// Frame limits for delta coalescing.
const (
	frameMaxBytes = 1024
	frameWindow   = 5 * time.Millisecond
)

// emitter publishes one run's events with a per-run sequence.
type emitter struct {
	js      jetstream.JetStream
	subject string
	key     string
	run     string
	asJSON  bool
	log     zerolog.Logger

	mu        sync.Mutex
	seq       uint64
	attempt   int
	pending   *events.Event // the delta frame being coalesced
	buf       []byte        // its deltas
	lastFrame time.Time     // when the last delta frame went out
	timer     *time.Timer
	futures   []jetstream.PubAckFuture
	failed    int
}

func (e *emitter) emit(stream string, data events.EventData) {
	e.mu.Lock()
	defer e.mu.Unlock()
	isDelta := (stream == events.StreamAssistant || stream == events.StreamThinking) && data.Phase == ""
	if isDelta && e.pending != nil && e.pending.Stream == stream {
		e.buf = append(e.buf, data.Delta...)
		e.pending.Data.Text = data.Text
		if len(e.buf) >= frameMaxBytes {
			e.flushLocked()
		}
		return
	}
	e.flushLocked()
	ev := e.newEvent(stream, data)
	if !isDelta {
		e.publishAsyncLocked(ev)
		return
	}
	now := time.Now()
	wait := frameWindow - now.Sub(e.lastFrame)
	if wait <= 0 {
		// Nothing went out lately: no reason to hold this delta back.
		e.lastFrame = now
		e.publishAsyncLocked(ev)
		return
	}
	// A frame just went out: collect what follows for the rest of the window.
	e.pending = ev
	e.buf = append(e.buf[:0], data.Delta...)
	if e.timer == nil {
		e.timer = time.AfterFunc(wait, e.onTimer)
	} else {
		e.timer.Reset(wait)
	}
}

func (e *emitter) onTimer() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.flushLocked()
}

func (e *emitter) newEvent(stream string, data events.EventData) *events.Event {
	e.seq++
	return &events.Event{V: events.Version, RunID: e.run, SessionKey: e.key, Seq: e.seq, Attempt: e.attempt,
		Stream: stream, TS: time.Now().UnixMilli(), Data: data}
}

func (e *emitter) flushLocked() {
	if e.pending == nil {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	e.pending.Data.Delta = string(e.buf)
	e.lastFrame = time.Now()
	e.publishAsyncLocked(e.pending)
	e.pending = nil
}

func (e *emitter) encode(ev *events.Event) (*nats.Msg, error) {
	data, ct, err := events.EncodeEvent(ev, e.asJSON)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(e.subject)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	m.Header.Set(events.HeaderStream, ev.Stream)
	return m, nil
}

func (e *emitter) publishAsyncLocked(ev *events.Event) {
	m, err := e.encode(ev)
	if err != nil {
		e.failed++
		e.log.Error().Err(err).Msg("encode event")
		return
	}
	f, err := e.js.PublishMsgAsync(m)
	if err != nil {
		e.failed++
		e.log.Warn().Err(err).Str("stream", ev.Stream).Msg("publish event")
		return
	}
	e.futures = append(e.futures, f)
}

// settle flushes the pending frame and waits until every event published so
// far is stored, but never forever: an async publish lost in a reconnect
// may never be answered.
func (e *emitter) settle(ctx context.Context) error {
	e.mu.Lock()
	e.flushLocked()
	futures := e.futures
	e.futures = nil
	e.mu.Unlock()
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			e.log.Warn().Err(err).Msg("event not stored")
		case <-wait.C:
			e.log.Warn().Msg("events not acknowledged within 10s; going on")
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// final waits for the run's events to be stored, then publishes the final
// event synchronously.
func (e *emitter) final(ctx context.Context, res *events.Result) error {
	if err := e.settle(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	attempt := e.attempt
	e.mu.Unlock()
	if err := e.publish(ctx, events.StreamFinal, events.EventData{Result: res}, attempt); err != nil {
		return fmt.Errorf("lanes: publish final event: %w", err)
	}
	return nil
}

// abort ends the current attempt on record: its events are stored, then an
// aborted event, so the next attempt's events follow it.
func (e *emitter) abort(ctx context.Context, why string) error {
	if err := e.settle(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	attempt := e.attempt
	e.mu.Unlock()
	return e.publish(ctx, events.StreamLifecycle, events.EventData{Phase: events.PhaseAborted, Error: why,
		EndedAt: time.Now().UnixMilli(), Attempt: attempt}, attempt)
}

// start starts an attempt: it publishes its first event synchronously, so
// the attempt is on record before any work.
func (e *emitter) start(ctx context.Context, data events.EventData, attempt int) error {
	data.Attempt = attempt
	return e.publish(ctx, events.StreamLifecycle, data, attempt)
}

// publish publishes one event synchronously as part of attempt.
func (e *emitter) publish(ctx context.Context, stream string, data events.EventData, attempt int) error {
	e.mu.Lock()
	e.attempt = attempt
	ev := e.newEvent(stream, data)
	e.mu.Unlock()
	m, err := e.encode(ev)
	if err != nil {
		return fmt.Errorf("lanes: encode event: %w", err)
	}
	if _, err := e.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("lanes: publish %s event: %w", stream, err)
	}
	return nil
}

// runState is what a run's earlier attempts left in the event stream.
type runState struct {
	attempt   int    // the last attempt that published an event; 0 = none
	lastPhase string // the lifecycle phase of the last event, if it is one
	finished  bool   // the run has its final event
}

// resume finds the last event already published for this run by earlier
// attempts, so the sequence continues, and reports what it says.
func (e *emitter) resume(ctx context.Context, stream jetstream.Stream) (runState, error) {
	raw, err := stream.GetLastMsgForSubject(ctx, e.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return runState{}, nil
	}
	if err != nil {
		return runState{}, fmt.Errorf("lanes: last event of run %s: %w", e.run, err)
	}
	ev, err := events.DecodeEvent(raw.Header.Get(events.HeaderContentType), raw.Data)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		// An undecodable last event: continue after its stream position.
		e.seq = raw.Sequence
		return runState{attempt: 1}, nil
	}
	e.seq = ev.Seq
	st := runState{attempt: ev.Attempt, finished: ev.Terminal()}
	if ev.Stream == events.StreamLifecycle {
		st.lastPhase = ev.Data.Phase
	}
	return st, nil
}
