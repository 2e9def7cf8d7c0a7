package lanefleet

import (
	"cmp"
	"container/list"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
)

// Live events. A client holds one subscription per lane whose runs it
// follows (agent.ev.<lane>.*), shared by every run of the lane it follows,
// and hands each run's messages to that run's feeds. Send subscribes before
// it publishes, so the run's follower sees its events from the first one
// and asks the lane service for stored events only when it must (a gap, a
// reconnect, a drop, a silence); a run followed later (Run, Follow, or a
// feed that expired) starts with a catch-up instead.
//
// The lane subscriptions are cheap to keep: they all deliver into one
// channel of the client, read by one dispatcher goroutine that runs while
// the client has any (nats.go gives each callback subscription a goroutine
// of its own), and the feeds Send opens that nobody followed yet are
// bounded (maxKept, oldest out), so a client sending to many sessions it
// does not follow holds a bounded number of subscriptions. WithoutFollow
// sends without one.

// Feed bounds.
const (
	// claimWithin is how long the feed Send opens waits for Events (or
	// Wait) to take it; then it closes and following starts with a
	// catch-up, as for a run joined late.
	claimWithin = 10 * time.Second
	// unclaimedBuffer bounds what a feed nobody follows yet holds; past
	// it the feed counts a drop and its follower catches up.
	unclaimedBuffer = 256
	// earlyKeep is how many of a lane's newest messages of runs without a
	// feed the lane keeps while a Send to it waits for its ack: a worker
	// may publish the run's first events before the ack names the run.
	// One run of a lane streams at a time, so they are the newest.
	earlyKeep = 64
	// maxKept bounds the feeds Send opened that nobody claimed yet, and so
	// the lane subscriptions they hold: past it the oldest expires early
	// (its run, when followed, starts with a catch-up).
	maxKept = 4096
	// laneBacklog is how many messages of the client's lane subscriptions
	// wait for the dispatcher; past it nats.go drops the newest and counts
	// the drop on its subscription (feed.lost), and the lane's followers
	// catch up.
	laneBacklog = 8192
)

// laneSub is the client's subscription to the events of one lane's runs.
type laneSub struct {
	c      *Client
	tok    string
	prefix string // agent.ev.<lane>.
	sub    *nats.Subscription
	refs   int // feeds and publishes in flight; guarded by c.mu
	// refused: the server refused the subscription (the user may not
	// subscribe to the lane's events); its feeds see nothing.
	refused atomic.Bool

	mu      sync.Mutex
	feeds   map[string][]*feed // by run id
	sending int                // publishes waiting for their ack
	early   []*nats.Msg        // ring of the newest messages no feed took, while sending
	next    int                // where early's next message goes
}

// feed is one follower's share of its lane's subscription: the messages of
// one run, queued until the follower takes them.
type feed struct {
	lane  *laneSub
	run   string
	ready chan struct{} // a message was queued (capacity one)
	// fromStart: the subscription was in place before the run's message
	// was stored, so it sees the run's events from the first one on.
	fromStart bool

	mu      sync.Mutex
	queue   []*nats.Msg
	limit   int
	dropped int // messages lost to a full queue
	closed  bool
	expiry  *time.Timer // closes a feed Send opened that nobody claimed
	// kept is the feed's place among the client's unclaimed feeds while
	// Send's feed waits for Events; guarded by the client's mu.
	kept *list.Element
}

// keptFeed is a feed Send opened, in the client's list of unclaimed ones.
type keptFeed struct {
	r *Run
	f *feed
}

// holdLane returns the lane's subscription, subscribing when the client
// has none, and holds it until release.
func (c *Client) holdLane(tok string) (*laneSub, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refusedLanes[tok] {
		return nil, errLaneRefused
	}
	if ls := c.lanes[tok]; ls != nil {
		ls.refs++
		return ls, nil
	}
	ls := &laneSub{c: c, tok: tok, prefix: events.EventPrefix + tok + ".", refs: 1, feeds: map[string][]*feed{}}
	if c.evs == nil {
		c.evs = make(chan *nats.Msg, laneBacklog)
	}
	sub, err := c.nc.ChanSubscribe(ls.prefix+"*", c.evs)
	if err != nil {
		return nil, err
	}
	ls.sub = sub
	c.subLanes.Store(sub, ls)
	if c.nsubs++; c.stopDispatch == nil {
		stop, done := make(chan struct{}), make(chan struct{})
		go c.dispatch(c.dispatched, stop, done)
		c.stopDispatch, c.dispatched = stop, done
	}
	if c.lanes == nil {
		c.lanes = map[string]*laneSub{}
	}
	c.lanes[tok] = ls
	return ls, nil
}

// release drops a hold; the last one unsubscribes.
func (ls *laneSub) release() {
	c := ls.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if ls.refs--; ls.refs > 0 {
		return
	}
	if c.lanes[ls.tok] == ls {
		delete(c.lanes, ls.tok)
	}
	_ = ls.sub.Unsubscribe()
	c.subLanes.Delete(ls.sub)
	if c.nsubs--; c.nsubs == 0 {
		close(c.stopDispatch)
		c.stopDispatch = nil
	}
}

// dispatch hands the messages of the client's lane subscriptions to their
// lanes, in the order the connection received them, until stop closes
// (the client's last lane subscription ended). The dispatcher before it
// (prev, nil for none) has returned by the time it reads: one reads at a
// time, so a lane's messages stay in order.
func (c *Client) dispatch(prev, stop, done chan struct{}) {
	defer close(done)
	if prev != nil {
		<-prev
	}
	for {
		select {
		case m := <-c.evs:
			// A message of a subscription that ended is dropped, as
			// nats.go drops a callback subscription's.
			if ls, ok := c.subLanes.Load(m.Sub); ok {
				ls.(*laneSub).deliver(m)
			}
		case <-stop:
			return
		}
	}
}

// refuse marks the subscription refused by the server and makes the next
// holdLane subscribe anew; holders keep theirs until they release it.
func (ls *laneSub) refuse() {
	ls.refused.Store(true)
	c := ls.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lanes[ls.tok] == ls {
		delete(c.lanes, ls.tok)
	}
	// Later sends to the lane do not ask again: each refusal is a
	// permission violation in the server's log and an error on the
	// connection. Bounded: past maxRefusedLanes the list starts over.
	if c.refusedLanes == nil || len(c.refusedLanes) >= maxRefusedLanes {
		c.refusedLanes = map[string]bool{}
	}
	c.refusedLanes[ls.tok] = true
}

// errLaneRefused: the server refused the client a subscription to the
// lane's events before; Send publishes without one, and following a run
// of the lane is ErrPermission. The refusal is remembered while the client
// lives (until maxRefusedLanes others start the list over): a permission the
// server grants later is seen by a new client.
var errLaneRefused = fmt.Errorf("%w: the lane's events may not be subscribed to (refused before)", ErrPermission)

// maxRefusedLanes bounds the lanes a client remembers it may not follow.
const maxRefusedLanes = 4096

// sendStarts says a publish to the lane waits for its ack: the lane keeps
// the messages of runs without a feed until sendEnds.
func (ls *laneSub) sendStarts() {
	ls.mu.Lock()
	ls.sending++
	ls.mu.Unlock()
}

// sendEnds says the publish got its ack (and opened its feed) or failed.
func (ls *laneSub) sendEnds() {
	ls.mu.Lock()
	if ls.sending--; ls.sending == 0 {
		ls.early, ls.next = nil, 0
	}
	ls.mu.Unlock()
}

// open returns a new feed of run's messages, with those the lane kept from
// before, holding the lane until the feed closes.
func (ls *laneSub) open(run string, limit int, fromStart bool) *feed {
	ls.c.mu.Lock()
	ls.refs++
	ls.c.mu.Unlock()
	f := &feed{lane: ls, run: run, ready: make(chan struct{}, 1), limit: limit, fromStart: fromStart}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for i := range ls.early {
		// Oldest first: the ring's next slot holds the oldest.
		if m := ls.early[(ls.next+i)%len(ls.early)]; m != nil && ls.runOf(m) == run {
			f.push(m)
		}
	}
	ls.feeds[run] = append(ls.feeds[run], f)
	return f
}

// runOf returns the run id in the subject of a message of the lane.
func (ls *laneSub) runOf(m *nats.Msg) string {
	if len(m.Subject) <= len(ls.prefix) {
		return ""
	}
	return m.Subject[len(ls.prefix):]
}

// deliver hands a message to the feeds of its run. A message of a run
// without a feed is kept while a publish waits for its ack (it may be the
// publish's run), else dropped.
func (ls *laneSub) deliver(m *nats.Msg) {
	run := ls.runOf(m)
	if run == "" {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	fs := ls.feeds[run]
	for _, f := range fs {
		f.push(m)
	}
	if len(fs) > 0 || ls.sending == 0 {
		return
	}
	if ls.early == nil {
		ls.early = make([]*nats.Msg, earlyKeep)
	}
	ls.early[ls.next] = m
	ls.next = (ls.next + 1) % len(ls.early)
}

// push queues m for the follower.
func (f *feed) push(m *nats.Msg) {
	f.mu.Lock()
	switch {
	case f.closed:
	case len(f.queue) >= f.limit:
		f.dropped++
	default:
		f.queue = append(f.queue, m)
	}
	f.mu.Unlock()
	select {
	case f.ready <- struct{}{}:
	default:
	}
}

// take returns the queued messages; buf, the batch take returned before,
// is reused.
func (f *feed) take(buf []*nats.Msg) []*nats.Msg {
	clear(buf)
	f.mu.Lock()
	defer f.mu.Unlock()
	batch := f.queue
	f.queue = buf[:0]
	return batch
}

// lost returns how many of the run's messages the feed lost so far: to its
// bound, or to the lane's subscription falling behind (a slow consumer).
func (f *feed) lost() int {
	f.mu.Lock()
	n := f.dropped
	f.mu.Unlock()
	if d, err := f.lane.sub.Dropped(); err == nil {
		n += d
	}
	return n
}

// expireUnclaimed closes f, the feed Send opened for r, after claimWithin
// unless claim takes it first; or earlier, once maxKept newer unclaimed
// feeds were opened.
func (f *feed) expireUnclaimed(r *Run) {
	f.mu.Lock()
	f.expiry = time.AfterFunc(claimWithin, func() { r.expire(f) })
	f.mu.Unlock()
	c := f.lane.c
	c.mu.Lock()
	f.kept = c.kept.PushBack(keptFeed{r: r, f: f})
	var out keptFeed
	if limit := cmp.Or(c.keepMax, maxKept); c.kept.Len() > limit {
		out = c.kept.Remove(c.kept.Front()).(keptFeed)
		out.f.kept = nil
	}
	c.mu.Unlock()
	if out.f != nil {
		out.r.expire(out.f)
	}
}

// unkeep takes f off the client's unclaimed feeds.
func (f *feed) unkeep() {
	c := f.lane.c
	c.mu.Lock()
	if f.kept != nil {
		c.kept.Remove(f.kept)
		f.kept = nil
	}
	c.mu.Unlock()
}

// expire closes f, the feed Send opened for r, unless Events took it.
func (r *Run) expire(f *feed) {
	if r.live.CompareAndSwap(f, nil) {
		f.close()
	}
}

// claim makes f a follower's: it stops its expiry and lifts its bound to
// liveBuffer.
func (f *feed) claim() {
	f.unkeep()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.expiry != nil {
		f.expiry.Stop()
	}
	f.limit = liveBuffer
}

// close stops f's deliveries and releases its hold on the lane.
func (f *feed) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed, f.queue = true, nil
	if f.expiry != nil {
		f.expiry.Stop()
	}
	f.mu.Unlock()
	f.unkeep()
	ls := f.lane
	ls.mu.Lock()
	fs := ls.feeds[f.run]
	for i, g := range fs {
		if g == f {
			fs = append(fs[:i], fs[i+1:]...)
			break
		}
	}
	if len(fs) == 0 {
		delete(ls.feeds, f.run)
	} else {
		ls.feeds[f.run] = fs
	}
	ls.mu.Unlock()
	ls.release()
}
