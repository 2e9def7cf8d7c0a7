package lanefleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// RunState says why following a run sees no event (see Run.OnWait).
type RunState string

// Run states reported to OnWait.
const (
	// RunNoWorker: no worker answers the lane service. The message is
	// stored and runs once a worker starts.
	RunNoWorker RunState = "no-worker"
	// RunQueued: the message waits on its session's lane, behind the
	// session's earlier messages or for a worker to take the lane.
	RunQueued RunState = "queued"
	// RunHandOver: the worker running the run stopped answering: it
	// does not renew its lease on the session's lane (Wait.Worker names
	// it), and another worker takes the run over once the lease lapses,
	// within Wait.Within; or the lease lapsed already (Worker "") and the
	// run starts again when a worker takes the lane. The hand-over ends
	// with the next attempt's lifecycle restart event.
	RunHandOver RunState = "hand-over"
	// RunDisconnected: the client's NATS connection dropped (Wait.Err
	// says why, when nats.go does); nats.go reconnects, giving up after
	// Wait.Within (0: it does not give up, or cannot tell when). No
	// event comes meanwhile.
	RunDisconnected RunState = "disconnected"
	// RunReconnected ends RunDisconnected: the connection is back, and
	// following catches up with what it missed.
	RunReconnected RunState = "reconnected"
)

// Wait is why following a run sees no event, as OnWait reports it.
type Wait struct {
	State RunState
	// Worker is, for RunHandOver, the worker that stopped answering;
	// "" once its lease lapsed.
	Worker string
	// Within is the longest the wait should last: for RunHandOver until
	// the unanswering worker's lease lapses, for RunDisconnected until
	// nats.go gives up reconnecting; 0 when unknown or unbounded.
	Within time.Duration
	// Err is, for RunDisconnected, why the connection dropped (nil when
	// nats.go did not say).
	Err error
}

// OnWait makes following the run (Events, Wait) call fn once it has seen no
// event for after and knows why (RunNoWorker, RunQueued, RunHandOver), and
// again when that changes. A dropped connection is reported when seen,
// whatever after (RunDisconnected), and so is its return
// (RunReconnected). fn runs on the goroutine that iterates the events.
// OnWait returns r.
func (r *Run) OnWait(after time.Duration, fn func(Wait)) *Run {
	r.waitAfter, r.onWait = after, fn
	return r
}

// OnCaughtUp makes following the run (Events, Wait) call fn whenever it
// has yielded every event it holds and is about to wait for more: for live
// events, or for the lane service's answer. A consumer that buffers what
// it writes (a stream to a client) flushes it there: events that came
// together go out together, and none waits behind a silence. fn is called
// only after an event was yielded since its last call, never after the
// iteration ends (the consumer's loop ends then), and runs on the
// goroutine that iterates the events. OnCaughtUp returns r.
func (r *Run) OnCaughtUp(fn func()) *Run {
	r.onCaughtUp = fn
	return r
}

// Events yields the run's events from its first one, in order and each once,
// and stops after the final event. Joining late replays what was missed.
// Iteration ends early with an error when ctx is done, with ErrUnknownRun
// when the session has no such run, and with ErrPermission when the
// connection's user may not follow it; a message that is not an event of the
// run yields a *events.DecodeError and iteration goes on.
//
// Following costs nothing that lasts on the server: a subscription to the
// events of the session's runs (one per session and client, shared by the
// runs it follows), and requests to the workers' lane service for the
// stored events when live ones may be missing: when a gap shows events
// were missed, after a reconnect or a drop, and after a few seconds without
// an event. Following a run Send returned starts from its live events
// alone (Send subscribed before it published), if it starts within
// seconds of Send (and Send had no WithoutFollow); any other run starts
// with a request for its stored events, and one that already ended is
// read from the store alone. While no worker answers, following keeps
// asking (see OnWait).
//
// If the worker running the run dies (or the attempt fails), the attempt
// ends with a lifecycle "aborted" event and the next one starts with
// "restart": its assistant events' Text starts over; events of an older
// attempt that arrive after a newer one started (from a worker that lost the
// lane) are skipped. A message that did not get a turn of its own ends with
// a lifecycle event saying why (merged, error) and its final event.
func (r *Run) Events(ctx context.Context) iter.Seq2[*events.Event, error] {
	return func(yield func(*events.Event, error) bool) {
		f, err := r.follow()
		if err != nil {
			yield(nil, err)
			return
		}
		defer f.feed.close()
		f.run(ctx, yield)
	}
}

// Follower timing.
const (
	idleMin, idleMax = 2 * time.Second, 15 * time.Second   // ask for stored events after this long without one
	liveIdle         = 5 * time.Second                     // idleMin of a follower whose live feed saw the run from its start (see follow)
	gapMin, gapMax   = 20 * time.Millisecond, time.Second  // ask again while live events wait behind a gap
	errMin, errMax   = 250 * time.Millisecond, time.Second // ask again after a failed request
	unknownConfirm   = time.Second                         // a run unknown this long is unknown
	openFor          = idleMax                             // a catch-up this soon after a running event says so (EventsRequest.Open)
	leaseAfter       = time.Second                         // a catch-up this long after a running event asks for the lane's lease (EventsRequest.Lease): a silence, not a gap
	tick             = time.Second                         // look at the connection at least this often
	maxAhead         = 4096                                // live events held behind a gap
	liveBuffer       = 1024                                // live events waiting to be read
)

// follower is the state of one Events iteration.
type follower struct {
	r       *Run
	tok     string
	feed    *feed                    // the run's live messages
	batch   []*nats.Msg              // the feed's last batch
	next    uint64                   // seq of the next event to yield
	newest  int                      // newest attempt seen
	cursor  uint64                   // where the lane service resumes its walk
	ahead   map[uint64]*events.Event // live events past a gap, by seq
	open    bool                     // the last event yielded left the run running (sessionsvc.Open)
	noOpen  bool                     // the lane service predates EventsRequest.Open
	noLease bool                     // the lane service predates EventsRequest.Lease

	due          time.Time     // the next catch-up
	idle         time.Duration // the silence before the next catch-up
	idleFloor    time.Duration // idle after an event: idleMin, or liveIdle
	gap, errWait backoff.Counter
	lastEvent    time.Time
	unknownSince time.Time
	state, noted Wait // why no event comes (State "" when not known), and what OnWait was told last
	disconnected bool // the connection dropped, and OnWait was told
	reconnects   uint64
	lost         int  // live messages the feed lost
	unflushed    bool // an event was yielded since OnCaughtUp's function was last called
}

// follow starts following the run's live events: from the feed Send
// opened, or from a new one.
func (r *Run) follow() (*follower, error) {
	tok, err := events.KeyToken(r.Session)
	if err != nil {
		return nil, err
	}
	if _, err := events.EventSubject(r.Session, r.ID); err != nil {
		return nil, err
	}
	nc := r.c.nc
	reconnects := nc.Stats().Reconnects
	f := r.live.Swap(nil)
	if f != nil && f.lane.refused.Load() {
		f.close()
		f = nil
	}
	if f != nil {
		f.claim()
	} else {
		before := nc.LastError()
		lane, err := r.c.holdLane(tok)
		if errors.Is(err, ErrPermission) {
			return nil, fmt.Errorf("%w (follow run %s of session %q)", err, r.ID, r.Session)
		}
		if err != nil {
			return nil, fmt.Errorf("lanefleet: follow run %s: %w", r.ID, err)
		}
		f = lane.open(r.ID, liveBuffer, false)
		lane.release()
		// Live events from here on; the catch-up returns what came
		// before. A refused subscription is reported before the flush's
		// answer.
		err = nc.Flush()
		if err == nil {
			if err = r.c.denied(before, "Subscription to", lane.prefix+"*"); err != nil {
				lane.refuse()
			}
		}
		if err != nil {
			f.close()
			if errors.Is(err, ErrPermission) {
				return nil, fmt.Errorf("%w (follow run %s of session %q)", err, r.ID, r.Session)
			}
			return nil, fmt.Errorf("lanefleet: follow run %s: %w", r.ID, err)
		}
	}
	now := time.Now()
	fl := &follower{r: r, tok: tok, feed: f, next: 1, ahead: map[uint64]*events.Event{}, due: now, idle: idleMin, idleFloor: idleMin,
		gap: backoff.Counter{Policy: backoff.Policy{Base: gapMin, Max: gapMax}}, errWait: backoff.Counter{Policy: backoff.Policy{Base: errMin, Max: errMax}}, lastEvent: now,
		reconnects: reconnects}
	if f.fromStart {
		// Nothing to catch up on yet, and the live feed sees every event
		// unless the connection says it lost some (watchConn) or a gap
		// shows it: a look at the store after a silence is a safety net
		// (a loss nothing reports, a final that reached only the turn's
		// record), not the way events come, so it waits longer than for
		// a follower that joined late; a model's usual wait for its first
		// token then costs none or one. OnWait's delay comes first.
		first := jittered(liveIdle)
		if r.onWait != nil {
			first = min(first, r.waitAfter)
		}
		fl.due, fl.idle, fl.idleFloor = now.Add(first), liveIdle, liveIdle
	}
	return fl, nil
}

// jittered returns d give or take a fifth, at random: followers that
// started together (runs sent at once, to sessions whose models answer
// alike) spread their looks at the store instead of reaching the lane
// service in one burst, whose last requests are answered late, while the
// runs' events are being stored, and read them again.
func jittered(d time.Duration) time.Duration {
	return d - d/5 + rand.N(2*d/5+1)
}

// run yields the run's events until the final one, an error that ends the
// iteration, or the consumer stops.
func (f *follower) run(ctx context.Context, yield func(*events.Event, error) bool) {
	timer := time.NewTimer(tick)
	defer timer.Stop()
	for {
		if ctx.Err() != nil {
			yield(nil, fmt.Errorf("lanefleet: follow run %s: %w", f.r.ID, context.Cause(ctx)))
			return
		}
		lost := f.watchConn()
		if f.disconnected && !time.Now().Before(f.due) {
			// A look at the store cannot be answered now: it is made
			// once the connection is back (watchConn).
			f.due = time.Now().Add(tick)
		}
		if !time.Now().Before(f.due) {
			// Live events that came meanwhile go first: after a silence
			// they make the look at the store needless (events flow
			// again), and one made while the run's events are being
			// stored would read them again. After a loss they are taken
			// too (a full queue left as it is would lose every event
			// that comes next), but the look is made all the same: what
			// was lost (the final, maybe) is in the store.
			select {
			case <-f.feed.ready:
				if !f.takeLive(yield) {
					return
				}
			default:
			}
			if (lost || !time.Now().Before(f.due)) && !f.catchUp(ctx, yield) {
				return
			}
			continue
		}
		f.notify()
		select {
		case <-f.feed.ready:
		default:
			// Nothing more at hand: the consumer's turn to flush.
			f.caughtUp()
			timer.Reset(min(time.Until(f.due), tick))
			select {
			case <-f.feed.ready:
			case <-timer.C:
				continue
			case <-ctx.Done():
				continue
			}
		}
		if !f.takeLive(yield) {
			return
		}
	}
}

// takeLive offers the live events queued on the feed and reports whether
// the iteration goes on.
func (f *follower) takeLive(yield func(*events.Event, error) bool) bool {
	f.batch = f.feed.take(f.batch)
	for _, msg := range f.batch {
		ev, err := events.DecodeEvent(msg.Header.Get(events.HeaderContentType), msg.Data)
		if err != nil {
			if !yield(nil, err) {
				return false
			}
			continue
		}
		if !f.offer(ev, false, yield) {
			return false
		}
	}
	return true
}

// offer yields ev if it is the next event of the run, and reports whether
// the iteration goes on. Stored events (from a catch-up) are the truth: one
// past a gap means the store never got the events in between, so the gap is
// skipped. A live event past a gap waits for a catch-up to fill it.
func (f *follower) offer(ev *events.Event, stored bool, yield func(*events.Event, error) bool) bool {
	if ev.Seq > f.next && !stored {
		if len(f.ahead) < maxAhead {
			f.ahead[ev.Seq] = ev
		}
		if !f.gap.Retrying() {
			f.due = time.Now() // the first catch-up for a gap goes at once
		}
		return true
	}
	if !ev.Terminal() {
		if ev.Seq < f.next {
			return true // seen
		}
		// A worker that lost the lane may publish for a moment after the
		// next owner started a new attempt: its late events are not part
		// of the run any more.
		if ev.Attempt > 0 && ev.Attempt < f.newest {
			return true
		}
	}
	f.newest = max(f.newest, ev.Attempt)
	f.next = max(f.next, ev.Seq+1)
	f.open = sessionsvc.Open(ev)
	// An event says a worker runs the run: why it waited before (queued,
	// no worker, a hand-over) is over, and a later silence learns its
	// own reason from the next look at the store.
	f.lastEvent, f.idle, f.state, f.noted = time.Now(), f.idleFloor, Wait{}, Wait{}
	f.unflushed = true
	if !yield(ev, nil) || ev.Terminal() {
		return false
	}
	for seq := range f.ahead {
		if seq < f.next {
			delete(f.ahead, seq)
		}
	}
	if e, ok := f.ahead[f.next]; ok {
		delete(f.ahead, f.next)
		return f.offer(e, false, yield)
	}
	if len(f.ahead) == 0 {
		// Events flow: the next look at the store waits for a silence.
		f.gap.Reset()
		f.due = f.lastEvent.Add(jittered(f.idle))
	}
	return true
}

// catchUp asks the lane service for the stored events from the next one on
// and yields them; it schedules the next catch-up and reports whether the
// iteration goes on.
func (f *follower) catchUp(ctx context.Context, yield func(*events.Event, error) bool) bool {
	for {
		f.caughtUp() // the request may take a while
		rep, err := f.fetch(ctx)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				yield(nil, fmt.Errorf("lanefleet: follow run %s: %w", f.r.ID, context.Cause(ctx)))
				return false
			case errors.Is(err, nats.ErrNoResponders):
				f.state = Wait{State: RunNoWorker}
			case !transient(err):
				yield(nil, fmt.Errorf("lanefleet: follow run %s: %w", f.r.ID, err))
				return false
			}
			f.due = time.Now().Add(f.errWait.Next())
			return true
		}
		f.errWait.Reset()
		f.cursor = max(f.cursor, rep.Next)
		for _, se := range rep.Events {
			ev, err := events.DecodeEvent(se.ContentType(), se.Data)
			if err != nil {
				if !yield(nil, err) {
					return false
				}
				continue
			}
			if !f.offer(ev, true, yield) {
				return false
			}
		}
		now := time.Now()
		switch rep.State {
		case sessionsvc.StateUnknown:
			// Confirmed by a second look: a message whose final is on its
			// way can be between stores for a moment.
			if f.unknownSince.IsZero() {
				f.unknownSince = now
			} else if now.Sub(f.unknownSince) >= unknownConfirm {
				yield(nil, fmt.Errorf("%w: run %s of session %q (no such message, or its events expired)", ErrUnknownRun, f.r.ID, f.r.Session))
				return false
			}
			f.due = f.unknownSince.Add(unknownConfirm)
			return true
		case sessionsvc.StateQueued:
			f.state = Wait{State: RunQueued}
		case sessionsvc.StateRunning:
			f.state = handOver(rep.Lease)
		default:
			f.state = Wait{}
		}
		f.unknownSince = time.Time{}
		if rep.More {
			continue
		}
		if len(f.ahead) > 0 {
			f.due = now.Add(f.gap.Next())
		} else {
			f.due = now.Add(jittered(f.idle))
			f.idle = min(2*f.idle, idleMax)
		}
		return true
	}
}

// caughtUp calls OnCaughtUp's function if an event was yielded since its
// last call.
func (f *follower) caughtUp() {
	if f.unflushed && f.r.onCaughtUp != nil {
		f.unflushed = false
		f.r.onCaughtUp()
	}
}

// fetch asks the lane service for the stored events from the next one on.
// While the last event yielded is recent and left the run running, the
// request says so: a catch-up that finds nothing new then costs the service
// one read. After a longer silence it does not, so a run whose stored
// events are gone (expired, or discarded at the stream's limits) before its
// final reached the stream still ends with the final its record keeps. A
// worker that predates the field refuses it: the follower asks again
// without it, and does not send it again.
func (f *follower) fetch(ctx context.Context) (*sessionsvc.EventsReply, error) {
	silence := time.Since(f.lastEvent)
	open := f.open && !f.noOpen && silence < openFor
	lease := f.open && !f.noLease && silence >= leaseAfter
	data, err := f.request(ctx, open, lease)
	if lease && sessionsvc.RefusedNewField(err) {
		// Refused as a bad request: a worker that knows no Lease, if it
		// takes the request without it (another bad request says nothing
		// about Lease).
		data, err = f.request(ctx, open, false)
		f.noLease = err == nil
	}
	if open && sessionsvc.RefusedNewField(err) {
		// The same for an older worker that knows no Open either.
		data, err = f.request(ctx, false, false)
		f.noOpen = err == nil
	}
	if err != nil {
		return nil, err
	}
	var rep sessionsvc.EventsReply
	if err := decodeReply(data, &rep); err != nil {
		return nil, fmt.Errorf("malformed events reply: %w", err)
	}
	return &rep, nil
}

// request sends the events request for the next event on.
func (f *follower) request(ctx context.Context, open, lease bool) ([]byte, error) {
	body, err := json.Marshal(sessionsvc.EventsRequest{Run: f.r.ID, From: f.next, After: f.cursor, Open: open, Lease: lease})
	if err != nil {
		return nil, err
	}
	return f.r.c.requestMsg(ctx, &nats.Msg{Subject: sessionsvc.Subject(f.tok, sessionsvc.OpEvents), Data: body}, callTimeout)
}

// handOver is the wait a running run's lane lease shows: a hand-over when
// its holder stopped answering or the lease lapsed, else none.
func handOver(l *sessionsvc.Lease) Wait {
	switch {
	case l == nil:
	case l.Unresponsive:
		return Wait{State: RunHandOver, Worker: l.Worker, Within: time.Duration(l.LapsesInMs) * time.Millisecond}
	case l.Lapsed:
		return Wait{State: RunHandOver}
	}
	return Wait{}
}

// watchConn schedules a catch-up at once when live events may have been
// lost: the connection reconnected, or the subscription dropped messages.
// It tells OnWait's function when the connection drops and when it is
// back.
func (f *follower) watchConn() (lost bool) {
	nc := f.r.c.nc
	if n := nc.Stats().Reconnects; n != f.reconnects {
		f.reconnects, f.due, lost = n, time.Now(), true
	}
	if n := f.feed.lost(); n != f.lost {
		f.lost, f.due, lost = n, time.Now(), true
	}
	switch down := nc.IsReconnecting(); {
	case down && !f.disconnected:
		f.disconnected = true
		if f.r.onWait != nil {
			f.r.onWait(Wait{State: RunDisconnected, Err: nc.LastError(), Within: reconnectBound(nc.Opts)})
		}
	case !down && f.disconnected:
		f.disconnected = false
		if f.r.onWait != nil {
			f.r.onWait(Wait{State: RunReconnected})
		}
	}
	return lost
}

// reconnectBound is how long nats.go tries to reconnect with opts before
// it gives up: MaxReconnect rounds of a dial (Timeout at most) and a
// pause (ReconnectWait and its jitter); 0 when it never gives up or a
// custom delay decides.
func reconnectBound(opts nats.Options) time.Duration {
	if opts.MaxReconnect < 0 || opts.CustomReconnectDelayCB != nil || !opts.AllowReconnect {
		return 0
	}
	jitter := opts.ReconnectJitter
	if opts.Secure || opts.TLSConfig != nil {
		jitter = max(jitter, opts.ReconnectJitterTLS)
	}
	return time.Duration(opts.MaxReconnect) * (opts.Timeout + opts.ReconnectWait + jitter)
}

// notify tells OnWait's function why no event came for a while.
func (f *follower) notify() {
	told := f.state.State == f.noted.State && f.state.Worker == f.noted.Worker
	if f.r.onWait == nil || f.state.State == "" || told || time.Since(f.lastEvent) < f.r.waitAfter {
		return
	}
	f.noted = f.state
	f.r.onWait(f.state)
}
