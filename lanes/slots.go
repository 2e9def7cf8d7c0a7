package lanes

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/lanes/queue"
)

// Fair scheduling (see the package doc, "Scheduling"): a worker's slots are
// handed to the lanes that wait for one in the order they began to wait,
// and an owner that has used its budget yields its slot at a turn boundary
// when a lane waits.

// DefaultLaneTurnBudget is how many turns a lane runs before it yields its
// slot to a waiting lane.
const DefaultLaneTurnBudget = 1

// waitFactor bounds the deliveries a worker keeps waiting for a slot, as a
// multiple of its slots; past it a delivery is handed back at once, as
// without fairness.
const waitFactor = 4

// lineWait is how long a waiting delivery stays on this worker before it is
// handed back (a worker with room may take its lane; if it comes back here
// it keeps its place). It stays well under AckWait, so a waiting delivery
// needs no keep-alive.
func (w *Worker) lineWait() time.Duration {
	return min(time.Second, w.streams.cfg.AckWait/3)
}

// slots are a worker's lane slots and the lanes waiting for one. A slot
// also holds its trigger's payload bytes against the worker's in-flight
// byte budget (Config.MaxInflightBytes): a lane takes a slot only when one
// is free and its bytes fit, so a hostile sender's large messages cannot
// make every slot hold one at once; and the deliveries waiting in line
// hold at most the budget's worth of payloads besides (past it, one is
// handed back, as when too many wait).
type slots struct {
	mu       sync.Mutex
	size     int
	inUse    int
	maxBytes int64             // the byte budget; ≤ 0: none
	bytes    int64             // charged to the slots in use
	waitB    int64             // charged to the deliveries in line (at most maxBytes)
	queue    []*waiter         // oldest place first
	lanes    map[string]*place // lanes that wait, or were handed back a moment ago
	maxWait  int
	pruned   time.Time

	waiting atomic.Int32 // len(queue), read without the lock by owners
}

// place is a lane's place in the line: kept while one of its deliveries
// waits here and for a while after it was handed back, so its redelivery
// takes the same place again.
type place struct {
	since time.Time
	w     *waiter   // the delivery waiting now; nil while handed back
	left  time.Time // when w was handed back
	// need is what the lane's next message holds of the byte budget, when
	// an owner here let the lane go because it did not fit (see
	// slots.overBudget); 0 = nothing more than a delivery's own payload.
	// The lane's deliveries are charged at least this much, so its
	// trigger waits in line for the bytes instead of taking the lease
	// again only to let go. It goes with the place: when a slot is handed
	// to the lane, or the place is pruned.
	need int64
}

// waiter is one delivery waiting for a slot.
type waiter struct {
	token string
	since time.Time
	bytes int64         // what it is charged for its slot (see slots.charged)
	pay   int64         // its own payload's charge, which the line holds (see slots.charge)
	grant chan struct{} // closed when the slot is handed to it
	deps  int           // other deliveries of its lane acked because it waits (under slots.mu)
}

func newSlots(size int, maxBytes int64) *slots {
	return &slots{size: size, maxBytes: maxBytes, maxWait: waitFactor * size, lanes: map[string]*place{}}
}

// charge is what a payload of n bytes holds of the byte budget: n, at most
// the whole budget (a payload larger than it runs alone).
func (s *slots) charge(n int) int64 {
	if s.maxBytes <= 0 {
		return 0
	}
	return min(int64(max(n, 0)), s.maxBytes)
}

// fits reports whether a slot is free and b more bytes fit the budget
// (under s.mu).
func (s *slots) fits(b int64) bool {
	return s.inUse < s.size && (s.maxBytes <= 0 || s.bytes+b <= s.maxBytes)
}

// charged is what a delivery of the lane token with a payload of n bytes
// holds of the byte budget: its own payload's charge, or what the lane's
// next message needs if an owner let the lane go over the budget (under
// s.mu).
func (s *slots) charged(token string, n int, now time.Time) int64 {
	b := s.charge(n)
	if p := s.place(token, now); p != nil {
		b = max(b, p.need)
	}
	return b
}

// place returns the lane's place, nil if it has none or only one that
// prune would forget: a lane that went elsewhere long ago is not charged
// a stale need, nor taken for one that waits here (under s.mu).
func (s *slots) place(token string, now time.Time) *place {
	p := s.lanes[token]
	if p == nil || p.w == nil && now.Sub(p.left) > placeKept {
		return nil
	}
	return p
}

// occupy takes a free slot for the lane token, charged b bytes, when no
// lane waits: the lane's place (kept for this delivery, with what it
// needs) has served (under s.mu).
func (s *slots) occupy(token string, b int64) {
	s.inUse++
	s.bytes += b
	delete(s.lanes, token)
}

// take takes a free slot for a delivery of the lane token with a payload
// of n bytes (see charged) when no lane waits for one and the charge fits
// the byte budget. The caller puts back what it returns.
func (s *slots) take(token string, n int, now time.Time) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.charged(token, n, now)
	if len(s.queue) == 0 && s.fits(b) {
		s.occupy(token, b)
		return b, true
	}
	return 0, false
}

// put gives back a slot and the bytes charged to it: to the lanes that have
// waited longest, in order, as long as they fit; else they are free.
func (s *slots) put(b int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inUse--
	s.bytes -= b
	for len(s.queue) > 0 && s.fits(s.queue[0].bytes) {
		w := s.queue[0]
		s.queue = s.queue[1:]
		s.inUse++
		s.bytes += w.bytes
		s.waitB -= w.pay
		delete(s.lanes, w.token)
		close(w.grant)
	}
	s.waiting.Store(int32(len(s.queue)))
}

// grow adds b bytes to what a slot in use holds, if they fit the budget
// (an owner about to run a message larger than its trigger's). It never
// waits: an owner whose message does not fit lets its lane go for a while.
func (s *slots) grow(b int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxBytes > 0 && s.bytes+b > s.maxBytes {
		return false
	}
	s.bytes += b
	return true
}

// usedBytes returns the payload bytes charged to the slots in use.
func (s *slots) usedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// first returns when the lane first in line began to wait.
func (s *slots) first() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return time.Time{}, false
	}
	return s.queue[0].since, true
}

// used returns the slots in use.
func (s *slots) used() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inUse
}

// known reports whether the lane waits here or was handed back a moment ago.
func (s *slots) known(token string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.place(token, now) != nil
}

// joinResult is what wait did with a delivery.
type joinResult uint8

const (
	joinQueued joinResult = iota // it waits: see waiter.grant
	joinSlot                     // a slot was free after all: it has it
	joinSame                     // a delivery of its lane waits already
	joinFull                     // too many wait: hand it back
)

// wait puts a delivery of a lane, whose payload is n bytes, in line, at
// the lane's earlier place if it had one, and returns what it is charged
// (see charged). A delivery of a lane that waits already counts as that
// waiter's dependent (joinSame): the caller acks it. With rejoin the bound
// does not apply (a waiter that cannot be handed back goes back in line).
func (s *slots) wait(token string, n int, now time.Time, rejoin bool) (*waiter, int64, joinResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, pay := s.charged(token, n, now), s.charge(n)
	if len(s.queue) == 0 && s.fits(b) {
		s.occupy(token, b)
		return nil, b, joinSlot
	}
	p := s.place(token, now)
	switch {
	case p != nil && p.w != nil:
		p.w.deps++
		return nil, 0, joinSame
	case len(s.queue) >= s.maxWait && !rejoin:
		return nil, 0, joinFull
	case s.maxBytes > 0 && pay > 0 && s.waitB+pay > s.maxBytes && !rejoin:
		// A waiting delivery holds its payload too: the line holds at
		// most the budget's worth (of payloads: what a lane needs for its
		// next message is not charged while it waits).
		return nil, 0, joinFull
	case p == nil:
		p = &place{since: now}
		s.lanes[token] = p
	}
	w := &waiter{token: token, since: p.since, bytes: b, pay: pay, grant: make(chan struct{})}
	p.w = w
	i, _ := slices.BinarySearchFunc(s.queue, w.since, func(q *waiter, t time.Time) int {
		if q.since.After(t) {
			return 1
		}
		return -1 // after every waiter of the same time: first come, first served
	})
	s.queue = slices.Insert(s.queue, i, w)
	s.waitB += pay
	s.waiting.Store(int32(len(s.queue)))
	return w, b, joinQueued
}

// leave takes a waiting delivery out of line, keeping its lane's place for
// a while, and returns its dependents. It reports false when the slot was
// handed to it meanwhile: the caller then holds a slot.
func (s *slots) leave(w *waiter, now time.Time) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.queue, w)
	if i < 0 {
		return 0, false
	}
	s.queue = slices.Delete(s.queue, i, i+1)
	s.waitB -= w.pay
	s.waiting.Store(int32(len(s.queue)))
	if p := s.lanes[w.token]; p != nil && p.w == w {
		p.w, p.left = nil, now
	}
	s.prune(now)
	return w.deps, true
}

// requeue gives a lane that yields its slot a place at the end of the line,
// for its trigger's redelivery.
func (s *slots) requeue(token string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requeueLocked(token, now)
}

func (s *slots) requeueLocked(token string, now time.Time) *place {
	s.prune(now) // places of lanes that went elsewhere are not kept forever
	p := s.place(token, now)
	if p == nil {
		p = &place{since: now, left: now}
		s.lanes[token] = p
	}
	return p
}

// overBudget remembers that an owner let the lane go because its next
// message, charged need bytes, did not fit the byte budget: the lane gets
// a place at the end of the line, and its deliveries are charged at least
// need until a slot is handed to it (or the place is pruned, the lane
// having gone elsewhere). So its trigger's redelivery waits in line for
// the bytes like any delivery of that size, rather than taking a slot and
// the lease for its own small payload only to let the lane go again.
func (s *slots) overBudget(token string, need int64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.requeueLocked(token, now)
	p.need = max(p.need, need)
	if p.w == nil {
		p.left = now
	} else {
		// A delivery of the lane queued while the owner ran: it is the
		// one that takes the lane next, and must get room for the message.
		p.w.bytes = max(p.w.bytes, need)
	}
}

// placeKept is how long a lane keeps its place after its delivery left:
// long enough for a redelivery to come back here.
const placeKept = 5 * time.Second

// prune forgets the places of lanes whose delivery went elsewhere (another
// worker took the lane, or it was drained). It runs at most once a second.
func (s *slots) prune(now time.Time) {
	if now.Sub(s.pruned) < time.Second {
		return
	}
	s.pruned = now
	for token, p := range s.lanes {
		if p.w == nil && now.Sub(p.left) > placeKept {
			delete(s.lanes, token)
		}
	}
}

// fair reports whether lanes yield their slots (Config.LaneTurnBudget ≥ 0).
func (w *Worker) fair() bool { return w.cfg.LaneTurnBudget >= 0 }

// shouldYield reports whether an owner that has run turns since it took its
// slot at since, the last of them taking last, yields the slot before its
// next turn: it has used its turn or time budget, and the lane first in
// line has waited at least as long as that last turn took (so a lane that
// waits a moment while slots turn over does not make every owner yield,
// and one that keeps waiting gets the slot within two turns). Only an
// owner with a trigger can yield (the trigger, handed back, brings the
// lane back); a lane the sweep took drains on. Every owner runs at least
// one turn.
func (w *Worker) shouldYield(turns int, since time.Time, last time.Duration, trigger jetstream.Msg) bool {
	if !w.fair() || trigger == nil || turns == 0 || w.sched.waiting.Load() == 0 {
		return false
	}
	if turns < w.cfg.LaneTurnBudget && (w.cfg.LaneTimeBudget <= 0 || w.now().Sub(since) < w.cfg.LaneTimeBudget) {
		return false
	}
	first, ok := w.sched.first()
	return ok && w.now().Sub(first) >= last
}

// waitForSlot lets a delivery that found every slot busy (or its payload
// over the byte budget) wait for one, in line, for up to lineWait; then it
// is handed back (Nak), keeping its lane's place for its redelivery. It
// reports whether the delivery got a slot, and the bytes the slot holds
// (the caller runs it and puts both back); if not, the delivery is settled.
//
// Another delivery of a lane that waits here is acked (its owner-to-be
// drains it) and counted as the waiter's dependent. A waiter with
// dependents is handed back only if its own message still exists once it
// has left the line: if an owner elsewhere processed and deleted it, its
// redelivery would never come and the dependents' messages would be
// stranded, so it stays in line (kept alive) until it gets a slot here. A
// message found there can only be deleted later by an owner that takes
// the lane after the dependents' messages were stored, and drains them.
func (w *Worker) waitForSlot(msg jetstream.Msg, token string) (int64, bool) {
	n := len(msg.Data())
	wt, b, res := w.sched.wait(token, n, w.now(), false)
	switch res {
	case joinSlot:
		return b, true
	case joinSame:
		w.settleDelivery(msg, settleFollower)
		return 0, false
	case joinFull:
		w.settleDelivery(msg, settleBusy)
		return 0, false
	}
	w.stats.Waited.Add(1)
	t := time.NewTimer(w.lineWait())
	defer t.Stop()
	for {
		shutdown := false
		select {
		case <-wt.grant:
			return wt.bytes, true
		case <-t.C:
		case <-w.shutdown:
			shutdown = true
		}
		deps, left := w.sched.leave(wt, w.now())
		if !left {
			return wt.bytes, true // granted meanwhile
		}
		if shutdown || deps == 0 || w.messageExists(msg) {
			w.stats.HandedBack.Add(1)
			w.settleDelivery(msg, settleHandBack)
			return 0, false
		}
		// Its message is gone: wait on here, in the same place.
		if err := msg.InProgress(); err != nil {
			w.log.Debug().Err(err).Msg("waiting delivery in progress")
		}
		var again joinResult
		wt, b, again = w.sched.wait(token, n, w.now(), true)
		switch again {
		case joinSlot:
			return b, true
		case joinSame:
			// A newer delivery of the lane waits now and drains it.
			w.settleDelivery(msg, settleFollower)
			return 0, false
		}
		t.Reset(w.lineWait())
	}
}

// messageExists reports whether a delivery's message is still in the
// inbound stream (a read error says yes: the delivery is handed back as
// before).
func (w *Worker) messageExists(msg jetstream.Msg) bool {
	md, err := msg.Metadata()
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	_, err = w.streams.Inbound.GetMsg(ctx, md.Sequence.Stream)
	return !errors.Is(err, jetstream.ErrMsgNotFound)
}

// yieldsBefore reports whether the owner may yield before the lane's next
// message raw. Not before a message whose plan depends on when this
// owner's last turn ended (reject refuses and a heartbeat is dropped when
// it arrived while a turn ran, a collect batch queued behind a turn waits
// out its debounce): the lane's next owner would not know that time.
func (o *owner) yieldsBefore(raw *jetstream.RawStreamMsg) bool {
	m := o.read(raw).msg
	return m.Mode != queue.ModeReject && m.Mode != queue.ModeCollect && !m.Heartbeat
}
