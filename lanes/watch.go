package lanes

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

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
// stream stores; if it misses one (a reconnect, or a slow consumer: see
// laneWatches), that message still runs in order after the turn. The
// returned function ends the cutting. The subscription is the drain's:
// made by its first turn, kept for the next ones and the drain's looks at
// the lane (o.quiet), ended with the drain.
func (o *owner) watchCuts(ctx context.Context) (context.Context, func()) {
	turnCtx, cancel := context.WithCancelCause(ctx)
	q := o.quiet
	if q == nil {
		q = &quietWatch{notify: make(chan struct{}, 1), stored: make(chan struct{}, 1),
			maxPayload: o.cfg.MaxPayload, chat: o.cfg.chatCommands(o.key), now: o.now, log: &o.log, stats: o.stats}
		if err := o.w.watches.add(o.nc, o.subject, q); err != nil {
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
		o.quiet = q
	}
	// What judges a message must not read the owner's state: the turn's
	// stored mode and the ids seen so far go with its target.
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

// The lanes' watches share one channel and one goroutine per worker.
// nats.go runs a goroutine for every async subscription (and a turn in
// flight holds its lane's watch), so each lane's subscription is a
// channel subscription into the worker's one channel instead, read by
// one dispatcher that hands each message to its lane's quietWatch,
// found by the message's subscription: a message left in the channel
// for a watch that ended finds no watch and is dropped, never handed to
// the lane's next watch (a new subscription). One reader of a FIFO
// channel sees each lane's messages in the order the connection got them.
//
// The dispatcher does only the cheap part inline (count the arrival,
// wake a lingering owner). A message that arrives while a turn runs must
// be decoded to tell whether it cuts the turn, which can take
// milliseconds for a large one: those wait in the watch's own line,
// judged in order by a goroutine started while the line is not empty,
// so one lane's large messages delay neither the dispatcher nor another
// lane's cut. A watch's line holds what nats.go's pending limits let an
// async subscription hold (nats.DefaultSubPendingMsgsLimit messages,
// DefaultSubPendingBytesLimit bytes); past them a message is not judged,
// as nats.go would drop it: it runs in order after the turn instead of
// cutting it.
//
// When the channel is full (the dispatcher not scheduled while watchBuffer
// messages arrived), nats.go drops the message for its subscription and
// counts it there (Subscription.Dropped), and reports a slow consumer to
// the connection's error handler. A lost message costs what a lost
// message of an async subscription cost: quietWatch.empty sees the drop,
// so the drain reads the lane again rather than take it for empty; a
// lingering owner it would have woken waits out Config.Linger, then its
// release reads the lane again and takes it back (endAgain); a cut it
// carried is not made, and the message runs in order after the turn. The
// drops are counted in Stats.WatchDropped when the watch ends.
const watchBuffer = 8192

// laneWatches are a worker's lane watches and their dispatcher.
type laneWatches struct {
	// mu is held while a watch subscribes and is added, while one is
	// removed, and while the dispatcher hands a message over: a message
	// is never looked up before its watch is added, and once remove
	// returns the dispatcher hands its watch nothing more.
	mu   sync.Mutex
	ch   chan *nats.Msg
	by   map[*nats.Subscription]*quietWatch
	stop chan struct{} // closed to end the dispatcher; nil while none runs
	done chan struct{} // closed when the dispatcher ended
}

// add subscribes q to subject on nc, starting the dispatcher if none runs.
func (ws *laneWatches) add(nc *nats.Conn, subject string, q *quietWatch) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.ch == nil {
		ws.ch = make(chan *nats.Msg, watchBuffer)
		ws.by = map[*nats.Subscription]*quietWatch{}
	}
	sub, err := nc.ChanSubscribe(subject, ws.ch)
	if err != nil {
		return fmt.Errorf("lanes: watch lane: %w", err)
	}
	q.sub = sub
	ws.by[sub] = q
	if ws.stop == nil {
		ws.stop, ws.done = make(chan struct{}), make(chan struct{})
		go ws.dispatch(ws.ch, ws.stop, ws.done)
	}
	return nil
}

// remove ends q's subscription; the dispatcher hands it nothing more. It
// returns the messages nats.go dropped for it.
func (ws *laneWatches) remove(q *quietWatch) int {
	ws.mu.Lock()
	delete(ws.by, q.sub)
	ws.mu.Unlock()
	dropped, err := q.sub.Dropped()
	if err != nil {
		dropped = 0
	}
	_ = q.sub.Unsubscribe()
	q.closeLine()
	return dropped
}

// dispatch hands each message of ch to its watch until stop is closed.
func (ws *laneWatches) dispatch(ch <-chan *nats.Msg, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case m := <-ch:
			ws.hand(m)
		case <-stop:
			return
		}
	}
}

// hand hands m to its subscription's watch, if that watch has not ended.
func (ws *laneWatches) hand(m *nats.Msg) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if q := ws.by[m.Sub]; q != nil {
		q.arrived(m)
	}
}

// close ends the dispatcher (the worker stopped: no owner watches a lane).
// A watch added later starts another.
func (ws *laneWatches) close() {
	ws.mu.Lock()
	stop, done := ws.stop, ws.done
	ws.stop, ws.done = nil, nil
	ws.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// arrived is the dispatcher's part of a watched message: it counts the
// message and wakes a lingering owner; while a turn runs, the message
// joins the watch's line to be judged (judgeLine).
func (q *quietWatch) arrived(m *nats.Msg) {
	q.arrivals.Add(1)
	select {
	case q.notify <- struct{}{}:
	default:
	}
	if q.target.Load() == nil {
		return // between turns: the message runs in order
	}
	size := lineSize(m)
	q.lineMu.Lock()
	if q.lineClosed {
		q.lineMu.Unlock()
		return
	}
	if len(q.line) >= nats.DefaultSubPendingMsgsLimit || q.lineBytes+size > nats.DefaultSubPendingBytesLimit {
		first, pending := q.unjudged == 0, len(q.line)
		q.unjudged++
		q.lineMu.Unlock()
		q.stats.WatchDropped.Add(1)
		if first {
			q.log.Warn().Int("pending", pending).Msg("lane watch: too many messages waiting to be judged; those past the limit run in order instead of cutting the turn")
		}
		return
	}
	q.line = append(q.line, m)
	q.lineBytes += size
	start := !q.judging
	q.judging = true
	q.lineMu.Unlock()
	if start {
		go q.judgeLine()
	}
}

// lineSize is what a message counts against a watch's line's byte limit:
// its subject and payload (its reply subject, which the fleet never
// reads outside internal/reply, is bounded by the server's control line).
func lineSize(m *nats.Msg) int { return len(m.Subject) + len(m.Data) }

// judgeLine judges the watch's line in order until it is empty.
func (q *quietWatch) judgeLine() {
	for {
		q.lineMu.Lock()
		if len(q.line) == 0 || q.lineClosed {
			q.line, q.lineBytes, q.judging = nil, 0, false
			q.lineMu.Unlock()
			return
		}
		m := q.line[0]
		q.line[0] = nil
		q.line = q.line[1:]
		q.lineBytes -= lineSize(m)
		q.lineMu.Unlock()
		q.judge(m)
	}
}

// closeLine drops what waits to be judged: the watch ended.
func (q *quietWatch) closeLine() {
	q.lineMu.Lock()
	defer q.lineMu.Unlock()
	q.lineClosed = true
	q.line, q.lineBytes = nil, 0
}

// judge cuts the running turn if the message says so.
func (q *quietWatch) judge(m *nats.Msg) {
	t := q.target.Load()
	if t == nil {
		return // the turn ended: the message runs in order
	}
	now := q.now()
	if t.seen.Known(m.Header.Get(events.HeaderLaneMsgID), now) {
		return // a duplicate: it ends pointing at its first, in order
	}
	in, err := events.DecodeInbound(m.Header.Get(events.HeaderContentType), m.Data, q.maxPayload)
	if err != nil {
		return
	}
	in, cmd := chatCommand(in, q.chat)
	msg := msgOf(&jetstream.RawStreamMsg{}, in, cmd, t.stored, now)
	if queue.OnArrival(msg, true) == queue.ArriveCut {
		cause := errInterrupted
		if msg.Kind == queue.KindStop {
			cause = errStopped
		}
		t.cancel(cause)
	}
}

// quietWatch counts the messages a turn's watch saw arrive on the lane, so
// that the drain can tell the lane is still as empty as a steer poll found
// it, without reading it again.
type quietWatch struct {
	sub      *nats.Subscription // a channel subscription (laneWatches)
	arrivals atomic.Uint64
	notify   chan struct{} // a message arrived (one token at most)
	// stored: a message of the lane was delivered to this worker, so the
	// stream has stored it (one token at most; see Worker.watchStored).
	// The watch sees a message as it is published, before the stream
	// stores it; a lingering owner that finds nothing yet waits for this.
	stored chan struct{}
	target atomic.Pointer[cutTarget] // the running turn; nil between turns
	// What judging a message needs (the owner's configuration, clock,
	// log and counters): the judging goroutine reads no owner state.
	maxPayload int
	chat       bool
	now        func() time.Time
	log        *zerolog.Logger
	stats      *Stats
	// lineMu guards the messages waiting to be judged while a turn runs
	// (see laneWatches), their bytes, whether a goroutine judges them,
	// whether the watch ended, and how many were not judged.
	lineMu     sync.Mutex
	line       []*nats.Msg
	lineBytes  int
	judging    bool
	lineClosed bool
	unjudged   int
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

// endWatch unsubscribes the running turn's watch, if any, counting the
// messages it lost to a full channel (see laneWatches).
func (o *owner) endWatch() {
	if q := o.quiet; q != nil {
		if dropped := o.w.watches.remove(q); dropped > 0 {
			o.stats.WatchDropped.Add(int64(dropped))
			o.log.Warn().Int("dropped", dropped).Msg("lane watch: messages dropped (a slow consumer); they ran in order")
		}
		o.w.unwatchStored(o.token, q.stored)
		o.quiet = nil
	}
}
