package lanes

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/internal/slots"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// Polling bounds of the debounce wait: a core subscription on the lane says
// when a message arrives; it is looked for again shortly after in case the
// stream had not stored it yet, and every second in case a notice was lost.
const (
	debounceRecheck = 20 * time.Millisecond
	debouncePoll    = time.Second
)

// laneWatch tells a debounce wait that a message arrived on the lane.
type laneWatch struct {
	sub    *nats.Subscription
	notify chan *nats.Msg
}

func (o *owner) watchLane() (*laneWatch, error) {
	w := &laneWatch{notify: make(chan *nats.Msg, 64)}
	sub, err := o.nc.ChanSubscribe(o.subject, w.notify)
	if err != nil {
		return nil, fmt.Errorf("lanes: watch lane: %w", err)
	}
	w.sub = sub
	_ = o.nc.FlushTimeout(time.Second)
	return w, nil
}

func (w *laneWatch) close() {
	if w != nil {
		_ = w.sub.Unsubscribe()
	}
}

// wait returns when the lane may have a new message (shortly after a
// notice, or at the latest after debouncePoll) or at until, whichever
// comes first; never later than one debounce poll from now.
func (w *laneWatch) wait(ctx context.Context, d time.Duration, shutdown <-chan struct{}) error {
	timer := time.NewTimer(max(0, d))
	defer timer.Stop()
	poll := time.NewTimer(debouncePoll)
	defer poll.Stop()
	select {
	case <-timer.C:
	case <-w.notify:
		for len(w.notify) > 0 {
			<-w.notify
		}
		select {
		case <-time.After(debounceRecheck):
		case <-ctx.Done():
			return ctx.Err()
		}
	case <-poll.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-shutdown:
		return errShuttingDown
	}
	return nil
}

// watchCuts returns the turn's context, cancelled as soon as a message that
// cuts the running turn (queue.OnArrival: interrupt, rollback, stop) is
// published to the lane. It subscribes before the turn's start event is
// published (on the same connection), so a cut sent by a client that saw
// that event is never missed. A core subscription sees every message the
// stream stores; if it misses one (a reconnect), that message still runs in
// order after the turn. The returned function ends the cutting. The
// subscription is the drain's: made by its first turn, kept for the next
// ones and the drain's looks at the lane (o.quiet), ended with the drain.
func (o *owner) watchCuts(ctx context.Context) (context.Context, func()) {
	turnCtx, cancel := context.WithCancelCause(ctx)
	q := o.quiet
	if q == nil {
		q = &quietWatch{notify: make(chan struct{}, 1), stored: make(chan struct{}, 1)}
		sub, err := o.nc.Subscribe(o.subject, q.arrived(o.cfg.MaxPayload, o.cfg.chatCommands(o.key), o.now))
		if err != nil {
			o.log.Debug().Err(err).Msg("watch for interrupts")
			return turnCtx, func() { cancel(nil) }
		}
		o.w.watchStored(o.token, q.stored)
		// No flush: the subscription goes out on the connection before
		// the turn's start event does, and a server takes a connection's
		// protocol in order, so it has the subscription before anyone
		// can see that event and answer it with a cut. (A flush would
		// prove no more in a cluster, where the interest reaches the
		// other servers on its own, and it cost every turn a round trip.)
		q.sub, o.quiet = sub, q
	}
	// The callback must not read the owner's state: the turn's stored
	// mode and the ids seen so far go with its target.
	t := &cutTarget{cancel: cancel, stored: o.storedMode(), seen: o.lane.ids.Clone()}
	q.target.Store(t)
	return turnCtx, func() {
		q.target.CompareAndSwap(t, nil)
		cancel(nil)
	}
}

// cutTarget is the running turn a watched message may cut.
type cutTarget struct {
	cancel context.CancelCauseFunc
	stored queue.Mode
	// seen are the lane's message ids as of the turn's start: a message
	// reusing one is a duplicate (of the turn's own message, say) and
	// cuts nothing.
	seen *queue.IDs
}

// arrived is the watch's callback: it counts the message, wakes a lingering
// owner, and cuts the running turn if the message says so.
func (q *quietWatch) arrived(maxPayload int, chat bool, now func() time.Time) nats.MsgHandler {
	return func(m *nats.Msg) {
		q.arrivals.Add(1)
		select {
		case q.notify <- struct{}{}:
		default:
		}
		t := q.target.Load()
		if t == nil {
			return // between turns: the message runs in order
		}
		if t.seen.Known(m.Header.Get(events.HeaderLaneMsgID), now()) {
			return // a duplicate: it ends pointing at its first, in order
		}
		in, err := events.DecodeInbound(m.Header.Get(events.HeaderContentType), m.Data, maxPayload)
		if err != nil {
			return
		}
		in, cmd := chatCommand(in, chat)
		msg := msgOf(&jetstream.RawStreamMsg{}, in, cmd, t.stored, now())
		if queue.OnArrival(msg, true) == queue.ArriveCut {
			cause := errInterrupted
			if msg.Kind == queue.KindStop {
				cause = errStopped
			}
			t.cancel(cause)
		}
	}
}

// quietWatch counts the messages a turn's watch saw arrive on the lane, so
// that the drain can tell the lane is still as empty as a steer poll found
// it, without reading it again.
type quietWatch struct {
	sub      *nats.Subscription
	arrivals atomic.Uint64
	notify   chan struct{} // a message arrived (one token at most)
	// stored: a message of the lane was delivered to this worker, so the
	// stream has stored it (one token at most; see Worker.watchStored).
	// The watch sees a message as it is published, before the stream
	// stores it; a lingering owner that finds nothing yet waits for this.
	stored chan struct{}
	target atomic.Pointer[cutTarget] // the running turn; nil between turns
	// mu guards what the last steer poll found: nothing after seq, with
	// arrivals at count and the connection at reconnects; ok false when
	// the last poll found something or failed.
	mu         sync.Mutex
	ok         bool
	seq, count uint64
	reconnects uint64
}

// before is called right before a steer poll reads the lane past seq; it
// returns what after needs.
func (q *quietWatch) before() uint64 {
	if q == nil {
		return 0
	}
	return q.arrivals.Load()
}

// after records a steer poll's outcome: the lane had nothing past seq
// (empty), the watch having seen count arrivals before the read began.
func (q *quietWatch) after(empty bool, seq, count, reconnects uint64) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ok, q.seq, q.count, q.reconnects = empty, seq, count, reconnects
}

// reset forgets what the last steer poll found (a new turn starts).
func (q *quietWatch) reset() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ok = false
}

// empty reports whether the lane is known to hold nothing past seq: the
// last steer poll read nothing past seq, and since that read began the
// watch saw no message arrive, dropped none and the connection did not
// reconnect. A message the watch saw before the poll's read, which the
// stream stored only after it, makes the drain release the lane; the
// release reads the lane again before it lets go (see release).
func (q *quietWatch) empty(seq, reconnects uint64) bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.ok || q.seq != seq || q.reconnects != reconnects || q.arrivals.Load() != q.count {
		return false
	}
	dropped, err := q.sub.Dropped()
	return err == nil && dropped == 0
}

// linger keeps an empty lane for up to Config.Linger after a turn, waiting
// for the session's next message on the last turn's watch: a session whose
// client answers at once goes on without releasing and taking the lane
// again. It reports whether a message arrived. An owner never lingers
// while its slot would go to a lane waiting for one (slots.YieldNone: a
// tenant under its share lingers while only tenants at or over theirs
// wait), or when the worker shuts down.
func (o *owner) linger(ctx context.Context) bool {
	d := o.cfg.Linger
	if d <= 0 || o.quiet == nil || o.shuttingDown.Load() || o.sched.Yield(o.token) != slots.YieldNone {
		return false
	}
	// The lane was found empty with the watch at count arrivals: a token
	// left from before is stale, and one arrival since means a message.
	q := o.quiet
	select {
	case <-q.notify:
	default:
	}
	select {
	case <-q.stored: // a message the last look accounted for
	default:
	}
	q.mu.Lock()
	since := q.arrivals.Load() != q.count
	q.mu.Unlock()
	if since {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	o.lingering.Add(1)
	defer o.lingering.Add(-1)
	select {
	case <-q.notify:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-o.shutdown:
	}
	return false
}

// endWatch unsubscribes the running turn's watch, if any.
func (o *owner) endWatch() {
	if o.quiet != nil {
		_ = o.quiet.sub.Unsubscribe()
		o.w.unwatchStored(o.token, o.quiet.stored)
		o.quiet = nil
	}
}
