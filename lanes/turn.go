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

	em    *emitter
	steer func(ctx context.Context) []*events.Inbound
}

// Steer returns the steer-mode messages that reached the lane, right behind
// this turn, since the last call, and makes them part of this turn: they are
// committed with it and their runs end pointing at it. A handler that never
// calls Steer leaves them to run as follow-ups.
func (t *Turn) Steer(ctx context.Context) []*events.Inbound {
	if t.steer == nil {
		return nil
	}
	return t.steer(ctx)
}

// Emit publishes an event of the run. Consecutive assistant or thinking
// deltas are coalesced into frames; every other event flushes them first.
// Publishing is asynchronous: a lost event never fails the turn.
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
	frameMaxAge   = 20 * time.Millisecond
)

// emitter publishes one run's events with a per-run sequence.
type emitter struct {
	js      jetstream.JetStream
	subject string
	key     string
	run     string
	asJSON  bool
	log     zerolog.Logger

	mu      sync.Mutex
	seq     uint64
	attempt int
	pending *events.Event // coalescing delta frame
	timer   *time.Timer
	futures []jetstream.PubAckFuture
	failed  int
}

func (e *emitter) emit(stream string, data events.EventData) {
	e.mu.Lock()
	defer e.mu.Unlock()
	isDelta := (stream == events.StreamAssistant || stream == events.StreamThinking) && data.Phase == ""
	if isDelta && e.pending != nil && e.pending.Stream == stream {
		e.pending.Data.Delta += data.Delta
		e.pending.Data.Text = data.Text
		if len(e.pending.Data.Delta) >= frameMaxBytes {
			e.flushLocked()
		}
		return
	}
	e.flushLocked()
	ev := e.newEvent(stream, data)
	if isDelta {
		e.pending = ev
		e.timer = time.AfterFunc(frameMaxAge, func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.flushLocked()
		})
		return
	}
	e.publishAsyncLocked(ev)
}

func (e *emitter) newEvent(stream string, data events.EventData) *events.Event {
	e.seq++
	return &events.Event{V: events.Version, RunID: e.run, SessionKey: e.key, Seq: e.seq, Attempt: e.attempt,
		Stream: stream, TS: time.Now().UnixMilli(), Data: data}
}

func (e *emitter) flushLocked() {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	if e.pending != nil {
		e.publishAsyncLocked(e.pending)
		e.pending = nil
	}
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

// final flushes pending frames, waits for every event of the run to be
// stored, then publishes the final event synchronously.
func (e *emitter) final(ctx context.Context, res *events.Result) error {
	e.mu.Lock()
	e.flushLocked()
	futures := e.futures
	e.futures = nil
	ev := e.newEvent(events.StreamFinal, events.EventData{Result: res})
	e.mu.Unlock()
	// Wait for the run's events to be stored, but never forever: an async
	// publish lost in a reconnect may never be answered.
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			e.log.Warn().Err(err).Msg("event not stored")
		case <-wait.C:
			e.log.Warn().Msg("events not acknowledged within 10s; publishing the final event anyway")
			goto publish
		case <-ctx.Done():
			return ctx.Err()
		}
	}
publish:
	m, err := e.encode(ev)
	if err != nil {
		return fmt.Errorf("lanes: encode final event: %w", err)
	}
	if _, err := e.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("lanes: publish final event: %w", err)
	}
	return nil
}

// sync starts an attempt: it publishes its first event synchronously, so
// the attempt is on record before any work.
func (e *emitter) sync(ctx context.Context, stream string, data events.EventData, attempt int) error {
	e.mu.Lock()
	e.attempt = attempt
	data.Attempt = attempt
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

// resume finds the last event already published for this run by earlier
// attempts, so the sequence continues, and reports that attempt's number and
// whether the run already has its final event.
func (e *emitter) resume(ctx context.Context, stream jetstream.Stream) (attempt int, finished bool, err error) {
	raw, err := stream.GetLastMsgForSubject(ctx, e.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("lanes: last event of run %s: %w", e.run, err)
	}
	ev, err := events.DecodeEvent(raw.Header.Get(events.HeaderContentType), raw.Data)
	if err != nil {
		// An undecodable last event: continue after its stream position.
		e.seq = raw.Sequence
		return 1, false, nil
	}
	e.seq = ev.Seq
	return max(ev.Attempt, 1), ev.Terminal(), nil
}
