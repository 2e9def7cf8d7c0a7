// Package slots is a lane worker's scheduler: its slots (one per lane
// running at once), the byte budget the slots' payloads are charged
// against, and the line of deliveries waiting for a slot, ordered by when
// their lane began to wait, a freed slot going to the tenant furthest below
// its weighted share (Shares; see the lanes package doc, "Scheduling"). It
// is pure: the caller passes the time and settles the deliveries.
package slots

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// waitFactor bounds the deliveries a worker keeps waiting for a slot, as a
// multiple of its slots; past it a delivery is handed back at once, as
// without fairness.
const waitFactor = 4

// Scheduler keeps a worker's lane slots and the lanes waiting for one. A
// slot is also charged its trigger's payload bytes against the worker's
// in-flight byte budget (lanes.Config.MaxInflightBytes): a lane takes a
// slot only when one is free and its bytes fit, so a hostile sender's large
// messages cannot make every slot carry one at once; and the deliveries
// waiting in line are charged at most the budget's worth of payloads
// besides (past it, one is handed back, as when too many wait).
type Scheduler struct {
	mu       sync.Mutex
	size     int
	shares   Shares
	inUse    int
	running  map[string]int    // slots in use by tenant
	waitingT map[string]int    // deliveries in line by tenant
	recent   map[string]*seen  // tenants that took or waited for a slot lately (shareKept)
	recentW  int               // their weights, summed
	maxBytes int64             // the byte budget; ≤ 0: none
	bytes    int64             // charged to the slots in use
	waitB    int64             // charged to the deliveries in line (at most maxBytes)
	queue    []*Waiter         // oldest place first
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
	w     *Waiter   // the delivery waiting now; nil while handed back
	left  time.Time // when w was handed back
	// need is what the lane's next message is charged of the byte budget, when
	// an owner here let the lane go because it did not fit (see
	// slots.overBudget); 0 = nothing more than a delivery's own payload.
	// The lane's deliveries are charged at least this much, so its
	// trigger waits in line for the bytes instead of taking the lease
	// again only to let go. It goes with the place: when a slot is handed
	// to the lane, or the place is pruned.
	need int64
}

// Shares divide the slots among tenants when lanes wait for them: a free
// slot goes to the waiting tenant with the fewest slots in use for its
// weight (running / weight, ties to the lane that has waited longest),
// then to that tenant's lane that has waited longest; and a tenant with
// fewer deliveries in line than its weight's share of the line joins it
// even when the line is full (up to twice its bound); and a tenant under
// its share seen lately keeps as many slots as it used at once lately
// (up to its share; all such tenants together at most half the slots):
// while it uses fewer, the rest stay free for its next messages rather
// than go to a tenant at or over its share (see reserved). So a tenant
// with hundreds of waiting sessions neither takes every slot that frees
// nor fills the line against a quiet one, and the quiet one's next
// message takes a slot at once instead of waiting for a turn to end.
// With no Tenant every lane is one tenant's: the line is first come,
// first served.
type Shares struct {
	// Tenant names a lane's tenant by its token ("" = none, itself a
	// tenant).
	Tenant func(token string) string
	// Weight is a tenant's weight (default and below 1: 1).
	Weight func(tenant string) int
}

// tenant is a lane's tenant.
func (s *Scheduler) tenant(token string) string {
	if s.shares.Tenant == nil {
		return ""
	}
	return s.shares.Tenant(token)
}

// weight is a tenant's weight, at least 1.
func (s *Scheduler) weight(tenant string) int {
	if s.shares.Weight == nil {
		return 1
	}
	return max(s.shares.Weight(tenant), 1)
}

// Waiter is one delivery waiting for a slot.
type Waiter struct {
	token  string
	tenant string
	since  time.Time
	bytes  int64         // what it is charged for its slot (see Scheduler.charged)
	pay    int64         // its own payload's charge, which the line is charged (see Scheduler.Charge)
	grant  chan struct{} // closed when the slot is handed to it
	deps   int           // other deliveries of its lane acked because it waits (under Scheduler.mu)
}

// New returns a scheduler of size slots and a byte budget of maxBytes (≤ 0:
// none).
func New(size int, maxBytes int64, shares Shares) *Scheduler {
	return &Scheduler{size: size, maxBytes: maxBytes, maxWait: waitFactor * size, lanes: map[string]*place{}, shares: shares,
		running: map[string]int{}, waitingT: map[string]int{}, recent: map[string]*seen{}}
}

// shareKept is how long a tenant counts in the shares after it last took
// or waited for a slot, and how long the most slots it used at once
// count toward what is kept free for it (reserved).
const shareKept = 5 * time.Second

// seen is what the scheduler knows of a tenant seen lately (Shares).
type seen struct {
	at     time.Time // when it last took or waited for a slot
	weight int       // its weight when it was first seen (recentW counts it)
	// peak is the most slots it used and waited for at once, last
	// reached at peakAt.
	peak   int
	peakAt time.Time
}

// touch records that tenant took or waited for a slot at now (under s.mu).
func (s *Scheduler) touch(tenant string, now time.Time) {
	if s.shares.Tenant == nil {
		return
	}
	r := s.recent[tenant]
	if r == nil {
		r = &seen{weight: s.weight(tenant)}
		s.recent[tenant] = r
		s.recentW += r.weight
	}
	r.at = now
}

// demand records what tenant uses and waits for now, after it took or
// joined the line for a slot (under s.mu; after touch).
func (s *Scheduler) demand(tenant string, now time.Time) {
	r := s.recent[tenant]
	if r == nil {
		return
	}
	if n := s.running[tenant] + s.waitingT[tenant]; n >= r.peak || now.Sub(r.peakAt) > shareKept {
		r.peak, r.peakAt = n, now
	}
}

// totalWeight is the weights of the tenants seen lately and tenant's, summed
// (under s.mu).
func (s *Scheduler) totalWeight(tenant string) int {
	if _, ok := s.recent[tenant]; ok {
		return s.recentW
	}
	return s.recentW + s.weight(tenant)
}

// underSlots reports whether tenant has fewer slots in use than its
// weight's share of the slots among the tenants seen lately (under s.mu).
func (s *Scheduler) underSlots(tenant string) bool {
	return s.running[tenant]*s.totalWeight(tenant) < s.size*s.weight(tenant)
}

// reserved is how many free slots are kept for the tenants other than
// except that are under their share: for each, the most slots it used and
// waited for at once in the last shareKept, up to its share (at least
// one), less what it uses and waits for now; all together at most half
// the slots, so kept slots never idle more than half the worker (under
// s.mu).
func (s *Scheduler) reserved(except string, now time.Time) int {
	n := 0
	for t, r := range s.recent {
		if t == except || now.Sub(r.peakAt) > shareKept || !s.underSlots(t) {
			continue
		}
		share := max(s.size*s.weight(t)/s.totalWeight(t), 1)
		n += max(min(r.peak, share)-s.running[t]-s.waitingT[t], 0)
	}
	return min(n, s.size/2)
}

// keep reports whether the free slots stay free for the tenants under
// their share (reserved) rather than one more go to tenant, which is at or
// over its own (under s.mu).
func (s *Scheduler) keep(tenant string, now time.Time) bool {
	if s.shares.Tenant == nil || s.underSlots(tenant) {
		return false
	}
	return s.size-s.inUse <= s.reserved(tenant, now)
}

// mayTake reports whether a delivery of tenant may take a free slot: no
// lane waits, or it has none in line and is under its share; and the
// slot is not kept for a tenant under its share (under s.mu).
func (s *Scheduler) mayTake(tenant string, now time.Time) bool {
	if len(s.queue) > 0 && (s.shares.Tenant == nil || s.waitingT[tenant] > 0 || !s.underSlots(tenant)) {
		return false
	}
	return !s.keep(tenant, now)
}

// Charge is what a payload of n bytes is charged of the byte budget: n, at most
// the whole budget (a payload larger than it runs alone).
func (s *Scheduler) Charge(n int) int64 {
	if s.maxBytes <= 0 {
		return 0
	}
	return min(int64(max(n, 0)), s.maxBytes)
}

// fits reports whether a slot is free and b more bytes fit the budget
// (under s.mu).
func (s *Scheduler) fits(b int64) bool {
	return s.inUse < s.size && (s.maxBytes <= 0 || s.bytes+b <= s.maxBytes)
}

// charged is what a delivery of the lane token with a payload of n bytes
// is charged of the byte budget: its own payload's charge, or what the lane's
// next message needs if an owner let the lane go over the budget (under
// s.mu).
func (s *Scheduler) charged(token string, n int, now time.Time) int64 {
	b := s.Charge(n)
	if p := s.place(token, now); p != nil {
		b = max(b, p.need)
	}
	return b
}

// place returns the lane's place, nil if it has none or only one that
// prune would forget: a lane that went elsewhere long ago is not charged
// a stale need, nor taken for one that waits here (under s.mu).
func (s *Scheduler) place(token string, now time.Time) *place {
	p := s.lanes[token]
	if p == nil || p.w == nil && now.Sub(p.left) > placeKept {
		return nil
	}
	return p
}

// occupy takes a free slot for the lane token of tenant, charged b
// bytes, when no lane waits: the lane's place (kept for this delivery,
// with what it needs) has served (under s.mu).
func (s *Scheduler) occupy(token, tenant string, b int64, now time.Time) {
	s.inUse++
	s.bytes += b
	s.running[tenant]++
	s.demand(tenant, now)
	delete(s.lanes, token)
}

// Take takes a free slot for a delivery of the lane token with a payload
// of n bytes (see charged) when no lane waits for one and the charge fits
// the byte budget. The caller puts back what it returns.
func (s *Scheduler) Take(token string, n int, now time.Time) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.charged(token, n, now)
	t := s.tenant(token)
	s.touch(t, now)
	if s.fits(b) && s.mayTake(t, now) {
		s.occupy(token, t, b, now)
		return b, true
	}
	return 0, false
}

// Put gives back the slot of the lane token and the bytes charged to it:
// to the waiting lanes their tenants' shares put first (see Shares), in
// order, as long as they fit and the slot is not kept for a tenant under
// its share (reserved); else they are free.
func (s *Scheduler) Put(token string, b int64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(now)
	// The slot counts in its tenant's use up to now: a tenant whose
	// turns outlast shareKept is seen at each one's end.
	t := s.tenant(token)
	s.touch(t, now)
	s.demand(t, now)
	s.inUse--
	s.bytes -= b
	if s.running[t] <= 1 {
		delete(s.running, t)
	} else {
		s.running[t]--
	}
	s.grant(now)
}

// grant hands the free slots to the waiting lanes their tenants' shares
// put first, in order, as long as they fit and the slots are not kept for
// a tenant under its share (under s.mu).
func (s *Scheduler) grant(now time.Time) {
	for len(s.queue) > 0 {
		i := s.next()
		w := s.queue[i]
		if !s.fits(w.bytes) || s.keep(w.tenant, now) {
			break
		}
		s.queue = slices.Delete(s.queue, i, i+1)
		s.unwait(w)
		s.inUse++
		s.bytes += w.bytes
		s.running[w.tenant]++
		delete(s.lanes, w.token)
		close(w.grant)
	}
	s.waiting.Store(int32(len(s.queue)))
}

// next is the index of the waiter a free slot goes to: the oldest of the
// tenant with the fewest slots in use for its weight (ties to the tenant
// whose lane has waited longest) (under s.mu).
func (s *Scheduler) next() int {
	if s.shares.Tenant == nil || len(s.waitingT) == 1 {
		return 0
	}
	best, seen := 0, make(map[string]bool, len(s.waitingT))
	for i, w := range s.queue {
		if seen[w.tenant] {
			continue
		}
		seen[w.tenant] = true
		b := s.queue[best]
		// running(w)/weight(w) < running(b)/weight(b)
		if s.running[w.tenant]*s.weight(b.tenant) < s.running[b.tenant]*s.weight(w.tenant) {
			best = i
		}
		if len(seen) == len(s.waitingT) {
			break
		}
	}
	return best
}

// unwait counts a waiter out of its tenant's deliveries in line (under
// s.mu).
func (s *Scheduler) unwait(w *Waiter) {
	s.waitB -= w.pay
	if s.waitingT[w.tenant] <= 1 {
		delete(s.waitingT, w.tenant)
	} else {
		s.waitingT[w.tenant]--
	}
}

// underShare reports whether tenant has fewer deliveries in line than its
// weight's share of the line's bound, among the tenants in line and it
// (under s.mu).
func (s *Scheduler) underShare(tenant string) bool {
	if s.shares.Tenant == nil {
		return false
	}
	total := s.weight(tenant)
	for t := range s.waitingT {
		if t != tenant {
			total += s.weight(t)
		}
	}
	return s.waitingT[tenant]*total < s.maxWait*s.weight(tenant)
}

// Grow adds b bytes to what a slot in use is charged, if they fit the budget
// (an owner about to run a message larger than its trigger's). It never
// waits: an owner whose message does not fit lets its lane go for a while.
func (s *Scheduler) Grow(b int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxBytes > 0 && s.bytes+b > s.maxBytes {
		return false
	}
	s.bytes += b
	return true
}

// Yield says whether a running lane gives its slot to the lanes in line
// at its next turn boundary (see Scheduler.Yield).
type Yield uint8

const (
	// YieldNone: nobody waits; or its tenant is under its share and no
	// tenant in line is: the slot would stay its tenant's (reserved), so
	// it keeps it (and may linger on it).
	YieldNone Yield = iota
	// YieldByWait: lanes wait, and its slot may go to one: it yields by
	// its turn budget once the first in line has waited long enough
	// (lanes.shouldYield).
	YieldByWait
	// YieldNow: its tenant is at or over its share and a tenant under its
	// share waits: the slot would go to that one, so it yields at once
	// (by its turn budget).
	YieldNow
)

// Yield says whether a running lane of token gives its slot to the lanes
// in line at its next turn boundary.
func (s *Scheduler) Yield(token string) Yield {
	if s.Waiting() == 0 {
		return YieldNone
	}
	if s.shares.Tenant == nil {
		return YieldByWait
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return YieldNone
	}
	t := s.tenant(token)
	under, otherUnder := s.underSlots(t), false
	for waiting := range s.waitingT {
		if waiting != t && s.underSlots(waiting) {
			otherUnder = true
			break
		}
	}
	switch {
	case !under && otherUnder:
		return YieldNow
	case under && !otherUnder && s.waitingT[t] == 0:
		return YieldNone
	}
	return YieldByWait
}

// UsedBytes returns the payload bytes charged to the slots in use.
func (s *Scheduler) UsedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// First returns when the lane first in line began to wait.
func (s *Scheduler) First() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return time.Time{}, false
	}
	return s.queue[0].since, true
}

// Used returns the slots in use.
func (s *Scheduler) Used() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inUse
}

// Known reports whether the lane waits here or was handed back a moment ago.
func (s *Scheduler) Known(token string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.place(token, now) != nil
}

// JoinResult is what Wait did with a delivery.
type JoinResult uint8

const (
	JoinQueued JoinResult = iota // it waits: see Waiter.Granted
	JoinSlot                     // a slot was free after all: it has it
	JoinSame                     // a delivery of its lane waits already
	JoinFull                     // too many wait: hand it back
)

// Wait puts a delivery of a lane, whose payload is n bytes, in line, at
// the lane's earlier place if it had one, and returns what it is charged
// (see charged). A delivery of a lane that waits already counts as that
// waiter's dependent (JoinSame): the caller acks it. With rejoin the bound
// does not apply (a waiter that cannot be handed back goes back in line).
func (s *Scheduler) Wait(token string, n int, now time.Time, rejoin bool) (*Waiter, int64, JoinResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, pay := s.charged(token, n, now), s.Charge(n)
	tenant := s.tenant(token)
	s.touch(tenant, now)
	if s.fits(b) && s.mayTake(tenant, now) {
		s.occupy(token, tenant, b, now)
		return nil, b, JoinSlot
	}
	p := s.place(token, now)
	switch {
	case p != nil && p.w != nil:
		p.w.deps++
		return nil, 0, JoinSame
	case !rejoin && s.full(tenant, pay):
		return nil, 0, JoinFull
	case p == nil:
		p = &place{since: now}
		s.lanes[token] = p
	}
	w := &Waiter{token: token, tenant: tenant, since: p.since, bytes: b, pay: pay, grant: make(chan struct{})}
	p.w = w
	s.waitingT[w.tenant]++
	s.demand(w.tenant, now)
	i, _ := slices.BinarySearchFunc(s.queue, w.since, func(q *Waiter, t time.Time) int {
		if q.since.After(t) {
			return 1
		}
		return -1 // after every waiter of the same time: first come, first served
	})
	s.queue = slices.Insert(s.queue, i, w)
	s.waitB += pay
	// Slots kept for a tenant under its share stay free only while its
	// use is recent (reserved): once it is not, they go to the line now,
	// not at the next Put (a long turn's end). The waiter may be granted
	// here; the caller sees it on Granted.
	s.grant(now)
	return w, b, JoinQueued
}

// full reports whether the line refuses a delivery of tenant whose payload
// is charged pay: it holds waitFactor times the slots (twice that for a
// tenant under its share of the line), or the budget's worth of payloads
// (a waiting delivery is charged its payload too; what a lane needs for
// its next message is not charged while it waits) (under s.mu).
func (s *Scheduler) full(tenant string, pay int64) bool {
	if len(s.queue) >= s.maxWait && (len(s.queue) >= 2*s.maxWait || !s.underShare(tenant)) {
		return true
	}
	return s.maxBytes > 0 && pay > 0 && s.waitB+pay > s.maxBytes
}

// Admits reports whether Wait would take a delivery of the lane token
// with a payload of n bytes now (a slot, a place in line, or as the
// dependent of its lane's waiter) rather than refuse it (JoinFull): one
// it would refuse is handed back without asking anything more.
func (s *Scheduler) Admits(token string, n int, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	tenant := s.tenant(token)
	if s.fits(s.charged(token, n, now)) && s.mayTake(tenant, now) {
		return true
	}
	if p := s.place(token, now); p != nil && p.w != nil {
		return true
	}
	return !s.full(tenant, s.Charge(n))
}

// Leave takes a waiting delivery out of line, keeping its lane's place for
// a while, and returns its dependents. It reports false when the slot was
// handed to it meanwhile: the caller then holds a slot.
func (s *Scheduler) Leave(w *Waiter, now time.Time) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.queue, w)
	if i < 0 {
		return 0, false
	}
	s.queue = slices.Delete(s.queue, i, i+1)
	s.unwait(w)
	s.waiting.Store(int32(len(s.queue)))
	if p := s.lanes[w.token]; p != nil && p.w == w {
		p.w, p.left = nil, now
	}
	s.prune(now)
	return w.deps, true
}

// Requeue gives a lane that yields its slot a place at the end of the line,
// for its trigger's redelivery.
func (s *Scheduler) Requeue(token string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requeueLocked(token, now)
}

func (s *Scheduler) requeueLocked(token string, now time.Time) *place {
	s.prune(now) // places of lanes that went elsewhere are not kept forever
	p := s.place(token, now)
	if p == nil {
		p = &place{since: now, left: now}
		s.lanes[token] = p
	}
	return p
}

// OverBudget remembers that an owner let the lane go because its next
// message, charged need bytes, did not fit the byte budget: the lane gets
// a place at the end of the line, and its deliveries are charged at least
// need until a slot is handed to it (or the place is pruned, the lane
// having gone elsewhere). So its trigger's redelivery waits in line for
// the bytes like any delivery of that size, rather than taking a slot and
// the lease for its own small payload only to let the lane go again.
func (s *Scheduler) OverBudget(token string, need int64, now time.Time) {
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
func (s *Scheduler) prune(now time.Time) {
	if now.Sub(s.pruned) < time.Second {
		return
	}
	s.pruned = now
	for t, r := range s.recent {
		if now.Sub(r.at) > shareKept {
			delete(s.recent, t)
			s.recentW -= r.weight
		}
	}
	for token, p := range s.lanes {
		if p.w == nil && now.Sub(p.left) > placeKept {
			delete(s.lanes, token)
		}
	}
}

// Waiting returns how many deliveries wait in line; it takes no lock.
func (s *Scheduler) Waiting() int { return int(s.waiting.Load()) }

// Granted is closed when a slot is handed to the waiter.
func (w *Waiter) Granted() <-chan struct{} { return w.grant }

// Charged is what the waiter is charged for its slot: its payload's
// charge, or more if its lane needs more (see Scheduler.OverBudget).
func (w *Waiter) Charged() int64 { return w.bytes }
