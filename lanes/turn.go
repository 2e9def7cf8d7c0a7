package lanes

import (
	"context"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
	"github.com/nats-io/nats.go"
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
	// Settings are the session's stored run settings in force for this
	// turn (nil = none): the handler applies them where the message names
	// none. A settings message changes them exactly between two turns.
	Settings *events.RunSettings
	// State is the session's state before this turn: the auth profile
	// that answered its last turn, its running usage.
	State events.SessionState

	em    *emitter
	steer func(ctx context.Context) []*events.Inbound
	steps *StepLog
}

// StepLog is a run's step journal (see runner.StepStore), kept in the
// journal stream (kvstore.Journal): a re-run claims it when it reads it, so
// an older owner of the turn can no longer add to it; it is dropped once
// the turn commits.
type StepLog struct {
	j     *kvstore.Journal
	first bool // the run's first attempt: nothing can be recorded yet

	mu       sync.Mutex
	storeErr error // the first read or write that failed on a transient store error
}

// Steps returns the run's step journal; nil for a turn that is not run by
// a lane owner.
func (t *Turn) Steps() *StepLog { return t.steps }

// Steps returns the recorded steps, in order.
func (s *StepLog) Steps(ctx context.Context) ([][]byte, error) {
	if s.first {
		return nil, nil
	}
	steps, err := s.j.Steps(ctx)
	return steps, s.note(err)
}

// Put records step n; it fails once another owner claimed the journal.
func (s *StepLog) Put(ctx context.Context, n int, step []byte) error {
	return s.note(s.j.Put(ctx, n, step))
}

// note keeps err if it is the attempt's first transient store error
// (kvstore.Transient), and returns it.
func (s *StepLog) note(err error) error {
	if kvstore.Transient(err) {
		s.mu.Lock()
		if s.storeErr == nil {
			s.storeErr = err
		}
		s.mu.Unlock()
	}
	return err
}

// storeError returns the first read or write of the journal that failed on
// a transient store error (nil: none, or s is nil): an attempt whose
// handler failed after one ended on the store, not on the turn.
func (s *StepLog) storeError() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.storeErr
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
	// Usage is what the turn's model calls used (every call summed, cost
	// included; nil = nothing): the lane adds it to the session's running
	// total in the turn's record, so it counts once per committed turn.
	Usage *events.UsageMeta
	// AuthProfile is the auth profile that answered the turn ("" = none
	// or not known): stored with the session, its next turn starts on it.
	AuthProfile string
}

// Handler runs turns. A handler whose ctx is cancelled by a message that
// cuts the turn (interrupt, stop) may return what the turn did so far as
// an Outcome along with its error: the lane keeps its Entries in the
// transcript, unless the cut was a rollback.
type Handler interface {
	HandleTurn(ctx context.Context, t *Turn) (*Outcome, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t *Turn) (*Outcome, error)

// HandleTurn calls f.
func (f HandlerFunc) HandleTurn(ctx context.Context, t *Turn) (*Outcome, error) { return f(ctx, t) }

// dropSteps purges the journal of a committed turn in the background: the
// turn does not wait for it, and a purge that fails leaves the steps to the
// journal stream's MaxAge (a committed turn is never run again, so nothing
// reads them).
func (w *Worker) dropSteps(j *kvstore.Journal) {
	if !j.Written() {
		return // a first attempt that recorded nothing
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := j.Drop(ctx); err != nil {
			w.log.Debug().Err(err).Msg("drop the step journal of a committed turn")
		}
	}()
}
