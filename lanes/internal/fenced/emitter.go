// Package fenced publishes the events of one run, fenced: an Emitter claims
// the run with a marker naming its owner's lease revision, and every event
// it publishes expects that marker to be the fence subject's last message,
// so once a newer owner claims the run the stream refuses the older one's
// events (see the lanes package doc, "Fenced events"). Deltas are coalesced
// into frames and published asynchronously within a window; the first and
// last events of an attempt go out synchronously.
package fenced

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// Delta coalescing and publishing limits.
const (
	frameMaxBytes = 1024
	frameWindow   = 5 * time.Millisecond
	// frameHardMax bounds a frame that kept growing while the publish
	// window was full.
	frameHardMax = 64 << 10
	// ackTimeout is how long one event may stay unacknowledged before it
	// is counted as lost: an answer lost in a reconnect never comes.
	ackTimeout = 5 * time.Second
	// maxRetries bounds the republishes of one event refused because of a
	// concurrent write (10164) or a fence that had to be claimed again.
	maxRetries = 50
	// WideWindow is the publish window on a stream that is not replicated.
	WideWindow = 256
	// ProbeAfter: an event published after this long without an answer
	// from the server goes out alone (see pumpLocked).
	ProbeAfter = time.Second
)

// Emitter publishes one run's events with a per-run sequence, fenced (see
// Token). Events other than the first and last of an attempt go out
// asynchronously, up to window of them unacknowledged at once. A replicated
// stream refuses a write that expects a subject's last sequence while
// another such write on that subject is in flight (10164), so there the
// window is one event, and deltas arriving meanwhile coalesce into the next
// frame.
type Emitter struct {
	js      jetstream.JetStream
	events  jetstream.Stream // the event stream: last event and marker reads
	subject string           // agent.ev.<lane>.<run>
	key     string
	run     string
	asJSON  bool
	log     zerolog.Logger
	window  int              // events in flight at once; 0 means WideWindow
	quit    <-chan struct{}  // closed when the drain ends: nothing more is published
	lost    func(error)      // told once when a newer owner fenced this one; may be nil
	now     func() time.Time // Config.Now

	mu      sync.Mutex
	seq     uint64
	attempt int
	fence   uint64 // stream sequence of this owner's marker; 0 = none claimed
	rev     uint64 // the lease revision the marker names
	// claimID tells this emitter's markers from those of the owner's
	// other attempts at the run under the same lease revision.
	claimID   string
	pending   *events.Event // the delta frame being coalesced
	buf       []byte        // its deltas
	due       bool          // pending is due but the window is full
	lastFrame time.Time     // when the last delta frame went out
	timer     *time.Timer
	queue     []*outEvent   // encoded, waiting for room in the window
	inflight  []*outEvent   // published, unanswered, oldest first
	replay    []*outEvent   // refused, republished once the in-flight ones are answered
	idle      chan struct{} // closed when nothing is queued or in flight; nil when idle
	fenced    error         // why nothing more is published (a newer owner's fence)
	dropping  bool          // awaitAcks gave up: no more retries
	lastAck   time.Time     // when the server last answered a publish (or the claim)
	checking  bool          // after a silence: the fence is read before anything goes out
	probing   bool          // then one event goes out alone; the rest wait for its answer
	failed    int
}

// Config says what an Emitter publishes, and where.
type Config struct {
	JS      jetstream.JetStream
	Events  jetstream.Stream // the event stream: last event and marker reads
	Subject string           // agent.ev.<lane>.<run>
	Key     string           // the session key the events carry
	Run     string           // the run id the events carry
	JSON    bool             // encode events as JSON (the run's sender used JSON)
	Log     zerolog.Logger
	Window  int // events in flight at once; 0 = WideWindow
	Attempt int // the attempt events carry until Open or SetAttempt sets it
	// Quit is closed when the owner's drain ends: nothing more is
	// published.
	Quit <-chan struct{}
	// Lost is told once when a newer owner fenced this one; may be nil.
	Lost func(error)
	// Now is the clock of event times and of the silence after which the
	// fence is read again (see pumpLocked); default time.Now.
	Now func() time.Time
}

// New returns the emitter of one run. It publishes nothing before Open
// claims the run.
func New(c Config) *Emitter {
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Emitter{js: c.JS, events: c.Events, subject: c.Subject, key: c.Key, run: c.Run, asJSON: c.JSON, log: c.Log,
		window: c.Window, attempt: c.Attempt, quit: c.Quit, lost: c.Lost, now: c.Now}
}

// RunID returns the run whose events the emitter publishes.
func (e *Emitter) RunID() string { return e.run }

// SetAttempt sets the attempt the events published from now on carry.
func (e *Emitter) SetAttempt(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attempt = n
}

// Seq returns the sequence of the run's last event published so far.
func (e *Emitter) Seq() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seq
}

// Failed returns how many events could not be encoded, published or
// stored (events are replayable and losable; the final event is not).
func (e *Emitter) Failed() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

// outEvent is one encoded event on its way out.
type outEvent struct {
	m     *nats.Msg
	f     jetstream.PubAckFuture
	sent  time.Time
	tries int
}

func (e *Emitter) dropLocked() {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.pending, e.due = nil, false
	e.queue, e.replay = nil, nil
}

// haltedLocked reports that nothing more is to be published.
func (e *Emitter) haltedLocked() bool {
	if e.fenced != nil || e.dropping {
		return true
	}
	select {
	case <-e.quit:
		return true
	default:
		return false
	}
}

func (e *Emitter) roomLocked() bool {
	w := e.window
	if w <= 0 {
		w = WideWindow
	}
	return len(e.replay) == 0 && len(e.queue) == 0 && len(e.inflight) < w
}

func (e *Emitter) Emit(stream string, data events.EventData) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.haltedLocked() {
		return
	}
	isDelta := (stream == events.StreamAssistant || stream == events.StreamThinking) && data.Phase == ""
	if isDelta && e.pending != nil && e.pending.Stream == stream {
		e.buf = append(e.buf, data.Delta...)
		e.pending.Data.Text = data.Text
		if len(e.buf) >= frameMaxBytes {
			if e.roomLocked() || len(e.buf) >= frameHardMax {
				e.flushLocked()
			} else {
				e.due = true
			}
		}
		return
	}
	e.flushLocked()
	ev := e.newEvent(stream, data)
	if !isDelta {
		e.enqueueLocked(ev)
		return
	}
	now := e.now()
	wait := frameWindow - now.Sub(e.lastFrame)
	if wait <= 0 && e.roomLocked() {
		// Nothing went out lately: no reason to hold this delta back.
		e.lastFrame = now
		e.enqueueLocked(ev)
		return
	}
	// A frame just went out, or the window is full: collect what follows.
	e.pending = ev
	e.buf = append(e.buf[:0], data.Delta...)
	if wait <= 0 {
		e.due = true // goes out as soon as the window has room
		return
	}
	if e.timer == nil {
		e.timer = time.AfterFunc(wait, e.onTimer)
	} else {
		e.timer.Reset(wait)
	}
}

func (e *Emitter) onTimer() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pending == nil {
		return
	}
	if e.roomLocked() {
		e.flushLocked()
	} else {
		e.due = true
	}
}

func (e *Emitter) newEvent(stream string, data events.EventData) *events.Event {
	e.seq++
	return &events.Event{V: events.Version, RunID: e.run, SessionKey: e.key, Seq: e.seq, Attempt: e.attempt,
		Stream: stream, TS: e.now().UnixMilli(), Data: data}
}

// flushLocked sends the pending frame on its way.
func (e *Emitter) flushLocked() {
	if e.pending == nil {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	e.pending.Data.Delta = string(e.buf)
	e.lastFrame = e.now()
	ev := e.pending
	e.pending, e.due = nil, false
	e.enqueueLocked(ev)
}

func (e *Emitter) encode(ev *events.Event) (*nats.Msg, error) {
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

// setFenceLocked makes m conditional on the owner's marker being the last
// message of the run's fence subject.
func (e *Emitter) setFenceLocked(m *nats.Msg) {
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(e.fence, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, e.FenceSubject())
}

func (e *Emitter) enqueueLocked(ev *events.Event) {
	m, err := e.encode(ev)
	if err != nil {
		e.failed++
		e.log.Error().Err(err).Msg("encode event")
		return
	}
	e.queue = append(e.queue, &outEvent{m: m})
	e.pumpLocked()
}

// pumpLocked publishes queued events while the window has room, and starts
// the watcher that collects their answers.
//
// A core subscriber on the run's subject sees every publish, also those the
// stream refuses. So after a long silence (the process may have been
// paused while its lane went to another worker) nothing goes out before
// the watcher has read the run's fence: a newer owner's marker halts the
// Emitter without a word. Then one event goes out alone: if the lane was
// taken just after the read, that one refusal halts the Emitter.
func (e *Emitter) pumpLocked() {
	w := e.window
	if w <= 0 {
		w = WideWindow
	}
	if len(e.inflight) == 0 && len(e.queue) > 0 && !e.checking && e.now().Sub(e.lastAck) > ProbeAfter {
		e.checking, e.probing = true, true
	}
	if e.probing {
		w = 1
	}
	for !e.checking && len(e.replay) == 0 && len(e.queue) > 0 && len(e.inflight) < w {
		if e.fence == 0 {
			e.log.Error().Str("run_id", e.run).Msg("events published before the run was claimed: dropped")
			e.queue = nil
			break
		}
		out := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.setFenceLocked(out.m)
		f, err := e.js.PublishMsgAsync(out.m)
		if err != nil {
			e.failed++
			e.log.Warn().Err(err).Str("stream", out.m.Header.Get(events.HeaderStream)).Msg("publish event")
			continue
		}
		out.f, out.sent = f, time.Now()
		e.inflight = append(e.inflight, out)
	}
	if (len(e.inflight) > 0 || e.checking) && e.idle == nil {
		e.idle = make(chan struct{})
		go e.watch(e.idle)
	}
}

// errNoAck is an event whose answer did not come within ackTimeout.
var errNoAck = errors.New("lanes: event not acknowledged in time")

// watch collects the answers of the published events in order, retries the
// refused ones that can be retried, publishes what waited for room, and
// closes idle when nothing is left in flight.
func (e *Emitter) watch(idle chan struct{}) {
	t := time.NewTimer(ackTimeout)
	defer t.Stop()
	for {
		e.mu.Lock()
		if e.checking {
			e.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
			err := e.checkFence(ctx)
			cancel()
			e.mu.Lock()
			e.checking = false
			if err == nil {
				// The read counts as the server's answer (a failed read
				// leaves it to the probe's write): the probe goes out
				// now, alone, instead of starting another read, which
				// left the queue unpublished for good.
				e.lastAck = e.now()
				e.pumpLocked()
			}
		}
		if len(e.inflight) == 0 {
			e.idle = nil
			close(idle)
			e.mu.Unlock()
			return
		}
		head := e.inflight[0]
		e.mu.Unlock()
		t.Reset(time.Until(head.sent.Add(ackTimeout)))
		var err error
		select {
		case <-head.f.Ok():
		case err = <-head.f.Err():
		case <-t.C:
			err = errNoAck
		}
		retry := err != nil && e.refused(head, err)
		e.mu.Lock()
		if err == nil {
			e.lastAck, e.probing = e.now(), false
		}
		e.inflight[0] = nil
		e.inflight = e.inflight[1:]
		if retry && !e.haltedLocked() {
			e.replay = append(e.replay, head)
		}
		if len(e.inflight) == 0 && len(e.replay) > 0 {
			// Every later event was refused too (same fence): republish
			// them in order before anything queued after them.
			e.queue = append(e.replay, e.queue...)
			e.replay = nil
		}
		e.pumpLocked()
		if e.pending != nil && e.due && e.roomLocked() {
			e.flushLocked()
		}
		e.mu.Unlock()
	}
}

// refused decides what happens to an event the server refused: a write
// that met another in flight (10164) is retried; one whose fence moved on is
// retried if the fence is still ours (see recheck); anything else is lost
// (events are replayable and losable; the final event is not sent this way).
func (e *Emitter) refused(out *outEvent, err error) (retry bool) {
	busy, mismatch := kvstore.WriteConflict(err)
	e.mu.Lock()
	giveUp := e.dropping || e.fenced != nil
	e.mu.Unlock()
	if (busy || mismatch) && !giveUp && out.tries < maxRetries {
		out.tries++
		ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		defer cancel()
		if busy {
			return pause(ctx, out.tries) == nil
		}
		return e.recheck(ctx) == nil
	}
	if giveUp {
		return false
	}
	e.mu.Lock()
	e.failed++
	e.mu.Unlock()
	e.log.Warn().Err(err).Str("stream", out.m.Header.Get(events.HeaderStream)).Msg("event not stored")
	return false
}

// AwaitAcks sends the pending frame and waits until every event published so
// far is answered, but not forever: after ackTimeout the events still
// waiting for room are dropped, and only those in flight are waited for
// (each for at most ackTimeout), so a final event published next is the
// run's last.
func (e *Emitter) AwaitAcks(ctx context.Context) error {
	e.mu.Lock()
	e.flushLocked()
	idle := e.idle
	e.mu.Unlock()
	if idle != nil {
		wait := time.NewTimer(ackTimeout)
		defer wait.Stop()
		select {
		case <-idle:
		case <-wait.C:
			e.mu.Lock()
			dropped := len(e.queue) + len(e.replay)
			e.dropping = true
			e.dropLocked()
			idle = e.idle
			e.mu.Unlock()
			e.log.Warn().Int("dropped", dropped).Msg("events not acknowledged in time; going on without them")
			if idle != nil {
				select {
				case <-idle:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			e.mu.Lock()
			e.dropping = false
			e.mu.Unlock()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fenced
}
