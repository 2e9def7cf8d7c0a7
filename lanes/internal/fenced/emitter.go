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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// outEvent is one encoded event on its way out.
type outEvent struct {
	m     *nats.Msg
	f     jetstream.PubAckFuture
	sent  time.Time
	tries int
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

// pause waits a little longer on every retry of a conflicting write.
func pause(ctx context.Context, try int) error {
	t := time.NewTimer(min(time.Duration(try+1)*2*time.Millisecond, 50*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
