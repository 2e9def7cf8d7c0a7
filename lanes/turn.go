package lanes

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/chatcmd"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/message"
)

// Turn is one inbound message being processed by its lane's owner. The
// handler reads the message and the session's history from it and streams
// events through Emit; it returns the entries to append and the result, which
// the lane commits (fenced), publishes as the final event and only then
// counts as processed.
type Turn struct {
	SessionKey string
	Token      string
	SessionID  string // pi session id of the lane's transcript
	RunID      string // the inbound stream sequence, in decimal
	Seq        uint64 // inbound stream sequence
	Attempt    int    // 1 on the first try; more after a crash or retry
	Worker     string
	Inbound    *events.Inbound
	// History is the session so far; do not modify. Its array is never
	// written below its length: the lane's transcript grows in place,
	// and any other change to it (a reset, a re-read) is a new array
	// (transcripts.extend), as runner.Input.HistoryAppendOnly asks.
	History  []message.Entry
	Received time.Time
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
	// Queue are the session's stored queue settings (nil = none).
	Queue *events.QueueSettings
	// Command is the chat command the message is (nil = none; see
	// Config.ChatCommands): the handler answers it without the model,
	// but for the first message after /new or /reset.
	Command *chatcmd.Command

	em    *fenced.Emitter
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
	// life is the life the owner's lease names (nil: none): a step is
	// not recorded, and the turn goes no further, once it may be over.
	life *life

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
// A worker that may have been declared dead meanwhile (no beat confirmed
// for the liveness TTL: it was frozen) records nothing and fails the step,
// so the turn makes no further call before its owner stops it.
func (s *StepLog) Put(ctx context.Context, n int, step []byte) error {
	if lapsed, err := s.life.check(); err != nil {
		if lapsed {
			// As a store that did not answer: the attempt does not count,
			// and the owner retries it unless its lease is gone.
			s.mu.Lock()
			if s.storeErr == nil {
				s.storeErr = err
			}
			s.mu.Unlock()
		}
		return err
	}
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
//
// The lifecycle events that start and end a run or an attempt (start,
// restart, end, error, aborted) and the merged and steered notices are the
// lane's (laneOwned): it publishes them, the end or error event from the
// Outcome the handler returns. A handler's own are dropped, so a run never
// shows two.
func (t *Turn) Emit(stream string, data events.EventData) {
	if laneOwned(stream, data.Phase) {
		return
	}
	t.em.Emit(stream, data)
}

// laneOwned reports whether an event of stream and phase is one only the
// lane publishes.
func laneOwned(stream, phase string) bool {
	if stream != events.StreamLifecycle {
		return false
	}
	switch phase {
	case events.PhaseStart, events.PhaseRestart, events.PhaseEnd, events.PhaseError, events.PhaseAborted,
		events.PhaseMerged, events.PhaseSteered:
		return true
	}
	return false
}

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
	// EndText is the text of the run's lifecycle end event (a chat
	// command's reply, a notice); "" for a model's reply, which the final
	// event carries. The lane publishes that end event, or an error event
	// when Result carries an error (events.Result.ErrorText); nothing when
	// Result is nil.
	EndText string
	// Reset starts the session's transcript anew with this turn (/new,
	// /reset): the turn's record names a new session id and hides every
	// earlier record, the calls waiting for approval and the sticky auth
	// profile are dropped; the settings and the running usage stay.
	Reset bool
	// Spawned are the sub-agents the turn started (subagent.Spawned of
	// its entries): they join the session's pending children, even when a
	// rollback discards the entries (the children run all the same).
	Spawned []events.Child
}

// Handler runs turns. It streams the turn's content through Turn.Emit and
// reports how the turn ended in its Outcome; the lane publishes the run's
// lifecycle events from that (see Turn.Emit). A handler whose ctx is
// cancelled by a message that cuts the turn (interrupt, stop) may return
// what the turn did so far as an Outcome along with its error: the lane
// keeps its Entries in the transcript, unless the cut was a rollback.
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

// steerer returns the Turn's Steer function: at each model-call boundary
// it reads the steerable messages waiting behind the turn and takes what
// queue.Steer picks. Joined steer messages are consumed with the turn;
// steer-backlog ones are shown to it and stay on the lane.
func (o *owner) steerer(p *plan) func(ctx context.Context) []*events.Inbound {
	var mu sync.Mutex
	scan := p.through
	shown := false // a steer-backlog message was shown and stays on the lane
	q := o.quiet
	return func(ctx context.Context) []*events.Inbound {
		mu.Lock()
		defer mu.Unlock()
		count, reconnects := q.before(), o.nc.Stats().Reconnects
		batch, end, err := o.pendingSteers(ctx, scan)
		if err != nil && ctx.Err() == nil {
			o.log.Debug().Err(err).Msg("read steered messages")
		}
		q.after(err == nil && end && len(batch) == 0, scan, count, reconnects)
		msgs := make([]queue.Msg, len(batch))
		for i, c := range batch {
			msgs[i] = c.msg
		}
		sp := queue.Steer(msgs, scan, shown)
		scan, shown = sp.Scanned, sp.BacklogShown
		var out []*events.Inbound
		for _, c := range batch {
			if c.raw.Sequence > sp.Scanned {
				break
			}
			if c.msg.Mode == queue.ModeSteer {
				p.merged = append(p.merged, c)
				p.through = c.raw.Sequence
			} else {
				p.backlog = append(p.backlog, c)
			}
			out = append(out, c.in)
		}
		return out
	}
}

// pendingSteers reads the steerable messages (queue.Steerable) waiting
// right after seq; end reports that the lane has no message after them.
func (o *owner) pendingSteers(ctx context.Context, seq uint64) (batch []collected, end bool, err error) {
	for {
		next, err := o.next(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return batch, true, nil
		}
		if err != nil {
			return batch, false, err
		}
		c := o.read(next)
		if !queue.Steerable(c.msg) {
			return batch, false, nil
		}
		batch = append(batch, c)
		seq = next.Sequence
	}
}

// runTurn runs the handler on the turn, under turnCtx (cut by an
// interrupt, rollback or stop: see watchCuts), and commits what it returns.
//
// The turn's set-up and its end are in newTurn and turnEnded, not inlined
// here: this frame stays on the turn's stack while its model answers (see
// docs/scaling.md, "What a turn in flight holds").
func (o *owner) runTurn(ctx, turnCtx context.Context, endCutWatch func(), a *attempt, p *plan) error {
	turn := o.newTurn(a, p)
	out, err := o.callHandler(turnCtx, turn, a.log)
	return o.turnEnded(ctx, turnCtx, endCutWatch, a, p, turn, out, err)
}

// newTurn is the handler's view of an attempt's turn.
//
//go:noinline
func (o *owner) newTurn(a *attempt, p *plan) *Turn {
	turn := &Turn{SessionKey: o.key, Token: o.token, SessionID: o.lane.cursor.SessionID, RunID: a.em.RunID(), Seq: a.seq,
		Attempt: a.attempt, Worker: o.cfg.ID, Inbound: p.in, History: slices.Clip(o.lane.tx.entries), Received: p.run.raw.Time, Header: p.run.raw.Header, em: a.em,
		Settings: o.lane.settings.RunSettings(), Queue: o.lane.settings.Queue()}
	if p.in == p.run.in {
		turn.Command = p.run.cmd
	}
	if o.lane.cursor.State != nil {
		turn.State = *o.lane.cursor.State
	}
	turn.steer = o.steerer(p)
	turn.steps = &StepLog{j: o.store.Journal(o.token, a.seq), first: a.attempt == 1, life: o.lease.life}
	return turn
}

// turnEnded commits what the handler returned for a turn (out, or err),
// or ends a cut turn as interrupted.
//
//go:noinline
func (o *owner) turnEnded(ctx, turnCtx context.Context, endCutWatch func(), a *attempt, p *plan, turn *Turn, out *Outcome, err error) error {
	cut := errors.Is(context.Cause(turnCtx), errInterrupted) || errors.Is(context.Cause(turnCtx), errStopped)
	endCutWatch()
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
	o.lane.lastEnd = o.now()
	if out.Result != nil {
		o.endRun(a.em, a.attempt, runEnding(out.Result, out.EndText))
	}
	if err := o.commit(ctx, a.em, p, out); err != nil {
		return err
	}
	o.stats.Turns.Add(1)
	o.w.dropSteps(turn.steps.j)
	return nil
}

// newEmitter returns the emitter of one of the lane's runs, for the current
// drain: it halts when ctx ends, and a newer owner fencing its
// events ends the drain with ErrLeaseLost.
func (o *owner) newEmitter(ctx context.Context, run string, log zerolog.Logger, asJSON bool) *fenced.Emitter {
	window := fenced.WideWindow
	if o.streams.cfg.Replicas > 1 {
		window = 1
	}
	lose := o.lease.cancel
	return fenced.New(fenced.Config{JS: o.js, Events: o.streams.Events, Key: o.key, Run: run, Log: log, JSON: asJSON,
		Subject: events.EventPrefix + o.token + "." + run, Window: window, Quit: ctx.Done(), Now: o.now,
		Lost: func(err error) {
			if lose != nil {
				lose(err)
			}
		}})
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
	out, err = o.handler.HandleTurn(log.WithContext(ctx), t)
	if err == nil && out == nil {
		err = errors.New("lanes: handler returned no outcome")
	}
	return out, err
}
