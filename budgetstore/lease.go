package budgetstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanefleet/lanefleet/governance"
)

// ReachedError is a call refused because a budget would be passed: the
// session pauses.
type ReachedError struct {
	Scope    governance.Scope
	Limits   governance.Limits
	Exceeded *governance.ExceededError
	// unwritten: the refusal only waits for room and wrote nothing.
	unwritten bool
}

func (e *ReachedError) Error() string {
	return fmt.Sprintf("budget reached: %s's budget (%s): %v", e.Scope, e.Limits, e.Exceeded)
}

func (e *ReachedError) Unwrap() error { return e.Exceeded }

// lease is this worker's lease on one budget (governance.Lease): a
// reservation of a chunk of the budget in the bucket, against which the
// worker admits and settles its calls in memory. mu orders its calls'
// admissions, settles and writes; a write holds it across its round trip,
// so what was admitted in memory always fits what the bucket holds.
type lease struct {
	s  *Store
	sc governance.Scope
	id string

	mu sync.Mutex
	// grant is what the bucket reserves for the lease; inflight the worst
	// case of its calls admitted and not settled; unflushed what its
	// settled calls used and no write has reported yet.
	grant, inflight, unflushed governance.Amount
	limits                     governance.Limits // the budget's, as the last write saw them
	// spend: the grant written last Spends itself if it expires (it had a
	// surplus, so calls settled in memory may have used it).
	spend bool
	// tight: the grant has no surplus, so every settle writes.
	tight   bool
	written time.Time // the last write, by the wall clock (renewals)
	busy    bool      // a call was admitted since the last sweep
	gone    bool      // given back and out of the map: admit on a new lease
	// soft holds soft-limit crossings a write found with no call to tell:
	// the next settle tells them.
	soft []string
	// shrink asks the next admission to write and give back the surplus:
	// a call waits for room, the budget is paused, or its limits changed.
	shrink atomic.Bool
	// seenWaiting is the State.Waiting the watcher last acted on.
	seenWaiting atomic.Int64
	// lim is limits, for the watcher.
	lim atomic.Pointer[governance.Limits]
}

// errGone is a lease given back while a call was about to use it.
var errGone = errors.New("budgetstore: lease given back")

// leaseFor is this worker's lease on sc, new when it has none.
func (s *Store) leaseFor(sc governance.Scope) *lease {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	l, ok := s.leases[sc]
	if !ok {
		l = &lease{s: s, sc: sc, id: s.cfg.Worker + "." + strconv.FormatUint(s.seq.Add(1), 36)}
		s.leases[sc] = l
	}
	return l
}

// Hold is one call's admission against the leases of its budgets. Settle
// ends it.
type Hold struct {
	need   governance.Amount
	leases []*lease
	ended  atomic.Bool
}

// Reserve admits a call's worst case against every limited budget among
// scopes, from this worker's lease on each: in memory while the lease's
// grant holds it, else by a compare-and-set that takes a new chunk. With
// no budget it returns a nil Hold and costs nothing. A call that would fit
// but for reservations (other calls in flight, other workers' leases), or
// that a rate limit's window will have room for, waits until the budget
// changes or the window moves on and tries again, until ctx ends; onWait
// (when not nil) is told when it begins to wait, again when it waits
// past the time it was told, and when a wait for calls in flight becomes
// one for the window. When a budget has no room it marks the budget
// reached (pausing its sessions), releases what it admitted elsewhere and
// returns a *ReachedError. Other errors are the bucket's, wrapped, or
// ctx's cause.
func (s *Store) Reserve(ctx context.Context, scopes []governance.Scope, need governance.Amount, onWait func(Wait)) (*Hold, error) {
	budgets := s.budgets(scopes)
	if len(budgets) == 0 {
		return nil, nil
	}
	// told is the end of the wait onWait was last told of, toldKnown
	// whether it was a known one (a rate limit's window).
	var told time.Time
	toldKnown := false
	for {
		s.mu.RLock()
		changed := s.changed
		s.mu.RUnlock()
		h, err := s.reserve(ctx, budgets, need)
		r, ok := errors.AsType[*ReachedError](err)
		if !ok || r.Exceeded == nil || !r.Exceeded.Waits() {
			return h, err
		}
		// Wait for a change, for the window to move on, or for the
		// reservations to expire.
		now := s.b.cfg.Now()
		d, known := s.cfg.ReservationTTL, false
		if r.Exceeded.Free > 0 {
			d, known = min(d, max(time.UnixMilli(r.Exceeded.Free).Sub(now), time.Millisecond)), true
		}
		// The timer starts before onWait hears of the wait: the wait is
		// measured from now, whatever onWait does meanwhile.
		timer := s.after(d)
		if onWait != nil && (!now.Before(told) || known && !toldKnown) {
			w := Wait{Scope: r.Scope, Limits: r.Limits, Exceeded: r.Exceeded}
			if known {
				w.For = d
			}
			onWait(w)
			told, toldKnown = now.Add(d), known
		}
		select {
		case <-changed:
		case <-timer:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// TryReserve is Reserve without the wait: a call that would wait for room
// returns its *ReachedError (Exceeded.Waits) at once; its first try is
// Reserve's (a budget with no room is marked reached).
func (s *Store) TryReserve(ctx context.Context, scopes []governance.Scope, need governance.Amount) (*Hold, error) {
	budgets := s.budgets(scopes)
	if len(budgets) == 0 {
		return nil, nil
	}
	return s.reserve(ctx, budgets, need)
}

// Wait is a call that waits for room in a budget (Store.Reserve).
type Wait struct {
	Scope    governance.Scope
	Limits   governance.Limits
	Exceeded *governance.ExceededError
	// For is how long the call waits if nothing else is admitted
	// meanwhile (a rate limit's window moving on); 0 when it waits for
	// calls in flight to end.
	For time.Duration
}

// reserve tries once.
func (s *Store) reserve(ctx context.Context, budgets []governance.Scope, need governance.Amount) (*Hold, error) {
	h := &Hold{need: need, leases: make([]*lease, 0, len(budgets))}
	for _, sc := range budgets {
		for {
			l := s.leaseFor(sc)
			err := l.admit(ctx, need)
			if errors.Is(err, errGone) {
				continue
			}
			if err != nil {
				h.settle(context.WithoutCancel(ctx), governance.Amount{})
				return nil, err
			}
			h.leases = append(h.leases, l)
			break
		}
	}
	return h, nil
}

// Settle reports the call's real use to its leases (in memory, written
// with the lease's next write; at once near the cap) and returns the
// budgets whose soft limit was reached (dimensions per scope). A nil Hold
// settles nothing. Errors are the bucket's, joined: the use stays with
// the lease and is written later.
func (h *Hold) Settle(ctx context.Context, real governance.Amount) (soft map[governance.Scope][]string, err error) {
	if h == nil {
		return nil, nil
	}
	return h.settle(ctx, real)
}

func (h *Hold) settle(ctx context.Context, real governance.Amount) (map[governance.Scope][]string, error) {
	if h.ended.Swap(true) {
		return nil, nil
	}
	var errs []error
	var soft map[governance.Scope][]string
	for _, l := range h.leases {
		crossed, err := l.settle(ctx, h.need, real)
		if err != nil {
			errs = append(errs, err)
		}
		if len(crossed) > 0 {
			if soft == nil {
				soft = map[governance.Scope][]string{}
			}
			soft[l.sc] = crossed
		}
	}
	return soft, errors.Join(errs...)
}

// admit admits a call of need: in memory when the grant holds it beside
// the calls in flight and what they used, else by taking a new chunk.
func (l *lease) admit(ctx context.Context, need governance.Amount) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return errGone
	}
	l.busy = true
	if !l.shrink.Load() && !l.grant.IsZero() && l.inflight.Add(l.unflushed).Add(need).Within(l.grant, l.limits.Max) {
		l.inflight = l.inflight.Add(need)
		return nil
	}
	var (
		grant   governance.Amount
		soft    []string
		limits  governance.Limits
		removed bool
	)
	ttl := l.s.cfg.ReservationTTL
	shrinking := l.shrink.Swap(false)
	err := l.s.apply(ctx, l.sc, func(st *governance.State, now time.Time) error {
		if !st.Limits.Limited() {
			removed = true
			return errNoChange // the budget was removed since the cache saw it
		}
		used, _ := l.report(st, now)
		waiting, mine := st.Waiting, reservedFor(st, l.id)
		limits = st.Limits
		g, settled, err := st.Take(l.lease(now), used, need, true, ttl, now)
		grant, soft = g, settled.Soft
		if err == nil {
			return nil
		}
		ex, _ := errors.AsType[*governance.ExceededError](err)
		r := &ReachedError{Scope: l.sc, Limits: st.Limits, Exceeded: ex}
		if ex != nil && ex.Waits() && used.IsZero() && st.Waiting == waiting && mine == l.inflight {
			// Waiting for room, with nothing new to write: writing would
			// wake every other waiter for nothing.
			return &unwritten{r}
		}
		return r
	})
	var reached *ReachedError
	if err != nil && !errors.As(err, &reached) {
		if shrinking {
			l.shrink.Store(true)
		}
		return err
	}
	if removed {
		// No budget: the call runs unadmitted; the lease is given back by
		// the sweep.
		l.inflight = l.inflight.Add(need)
		return nil
	}
	if reached != nil && reached.unwritten {
		return reached
	}
	l.soft = append(l.soft, soft...)
	l.unflushed, l.limits, l.written = governance.Amount{}, limits, time.Now()
	l.lim.Store(&limits)
	if reached != nil {
		l.grant, l.spend, l.tight = l.inflight, false, true
		return reached
	}
	l.spend = grant != l.inflight.Add(need)
	l.inflight, l.grant, l.tight = l.inflight.Add(need), grant, !l.spend
	return nil
}

// unwritten is a refusal to return without writing the state fn was
// given.
type unwritten struct{ r *ReachedError }

func (u *unwritten) Error() string { return u.r.Error() }

// reservedFor is what st reserves for id.
func reservedFor(st *governance.State, id string) governance.Amount {
	for _, r := range st.Reservations {
		if r.ID == id {
			return r.Amount
		}
	}
	return governance.Amount{}
}

// lease is the lease as a write at now sees it.
func (l *lease) lease(now time.Time) governance.Lease {
	return governance.Lease{ID: l.id, Worker: l.s.cfg.Worker, InFlight: l.inflight, Expires: now.Add(l.s.cfg.ReservationTTL).UnixMilli()}
}

// report is the use a write adds to st: the unflushed use, unless the
// lease expired with a grant that Spent itself (the use was counted
// then); charged says so.
func (l *lease) report(st *governance.State, now time.Time) (used governance.Amount, charged bool) {
	if l.spend && !l.grant.IsZero() && !st.Holds(l.id, now) {
		return governance.Amount{}, true
	}
	return l.unflushed, false
}

// settle ends a call of need that used real. It writes when the lease is
// tight (near the cap every use is written at once), when its surplus is
// wanted back, or when the use may cross the budget's soft limit (the
// write says exactly whether it did).
func (l *lease) settle(ctx context.Context, need, real governance.Amount) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight = l.inflight.Sub(need)
	l.unflushed = l.unflushed.Add(real)
	soft := l.soft
	l.soft = nil
	write := l.tight || l.shrink.Load()
	if !write && l.limits.SoftPct > 0 && !real.IsZero() {
		l.s.mu.RLock()
		c := l.s.states[l.sc]
		l.s.mu.RUnlock()
		from := c.st.UsedNow(l.s.b.cfg.Now()).Add(l.unflushed).Sub(real)
		write = l.limits.SoftCrossed(from, real)
	}
	if !write {
		return soft, nil
	}
	crossed, err := l.keep(ctx, false)
	return append(soft, crossed...), err
}

// keep writes the lease: reports its use and renews it, keeping its
// surplus unless it is tight or wanted back (then only the calls in
// flight stay reserved; none when idle and nothing is in flight). It
// returns the soft-limit crossings the report made.
func (l *lease) keep(ctx context.Context, idle bool) ([]string, error) {
	shrinking := l.shrink.Swap(false)
	var (
		soft   []string
		keep   governance.Amount
		spend  bool
		limits governance.Limits
	)
	err := l.s.apply(ctx, l.sc, func(st *governance.State, now time.Time) error {
		if !st.Limits.Limited() {
			return errNoChange // the budget was removed: nothing to report to
		}
		used, charged := l.report(st, now)
		keep, spend = l.grant.Sub(l.unflushed), true
		if l.tight || shrinking || charged || !st.Holds(l.id, now) {
			keep, spend = l.inflight, false
		}
		if idle && l.inflight.IsZero() {
			keep, spend = governance.Amount{}, false
		}
		limits = st.Limits
		soft = st.Keep(l.lease(now), used, keep, spend, now).Soft
		return nil
	})
	if err != nil {
		if shrinking {
			l.shrink.Store(true)
		}
		return nil, err
	}
	l.grant, l.spend, l.unflushed, l.limits, l.written = keep, spend, governance.Amount{}, limits, time.Now()
	l.lim.Store(&limits)
	if !spend {
		l.tight = true
	}
	return soft, nil
}

// giveBack writes the lease back, its use reported and only its calls in
// flight still reserved, and takes it out of the store's map when none is.
func (l *lease) giveBack(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return nil
	}
	if !l.grant.IsZero() || !l.unflushed.IsZero() {
		soft, err := l.keep(ctx, true)
		if err != nil {
			return err
		}
		l.soft = append(l.soft, soft...)
	}
	if !l.inflight.IsZero() {
		return nil
	}
	l.gone = true
	l.s.lmu.Lock()
	if l.s.leases[l.sc] == l {
		delete(l.s.leases, l.sc)
	}
	l.s.lmu.Unlock()
	return nil
}

// observeLease marks this worker's lease on sc to give its surplus back
// when st says another call waits for room, the budget is paused, or its
// limits changed, and hands it to the sweep.
func (s *Store) observeLease(sc governance.Scope, st governance.State) {
	s.lmu.Lock()
	l, ok := s.leases[sc]
	s.lmu.Unlock()
	if !ok {
		return
	}
	seen := l.seenWaiting.Load()
	if st.Waiting > seen {
		l.seenWaiting.Store(st.Waiting)
	}
	lim := l.lim.Load()
	if st.Waiting <= seen && st.Refused == nil && (lim == nil || st.Limits == *lim) {
		return
	}
	if l.shrink.Swap(true) {
		return
	}
	select {
	case s.nudge <- l:
	default: // the next admission or sweep writes it
	}
}

// sweep renews the leases every third of the TTL, gives back those idle
// for LeaseIdle, and writes the leases whose surplus is wanted back.
func (s *Store) sweep() {
	defer close(s.swept)
	every := min(s.cfg.ReservationTTL/3, s.cfg.LeaseIdle)
	t := time.NewTicker(every)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.closing
		cancel()
	}()
	for {
		select {
		case <-s.closing:
			return
		case l := <-s.nudge:
			l.mu.Lock()
			if l.shrink.Load() && !l.gone && (l.grant != l.inflight || !l.unflushed.IsZero()) {
				soft, err := l.keep(ctx, false)
				if err != nil {
					s.log.Warn().Err(err).Str("budget", l.sc.String()).Msg("budgetstore: give back a lease's surplus")
				}
				l.soft = append(l.soft, soft...)
			} else {
				l.shrink.Store(false)
			}
			l.mu.Unlock()
		case <-t.C:
			if time.Since(s.q.renewed) >= s.cfg.ReservationTTL/3 {
				s.q.renewed = time.Now()
				s.renewTurns(ctx)
			}
			s.lmu.Lock()
			ls := make([]*lease, 0, len(s.leases))
			for _, l := range s.leases {
				ls = append(ls, l)
			}
			s.lmu.Unlock()
			for _, l := range ls {
				if err := l.tick(ctx); err != nil {
					s.log.Warn().Err(err).Str("budget", l.sc.String()).Msg("budgetstore: renew a lease")
				}
			}
		}
	}
}

// tick gives the lease back when it was idle since the last tick, else
// renews it when a third of the TTL passed since its last write.
func (l *lease) tick(ctx context.Context) error {
	l.mu.Lock()
	idle := !l.busy && l.inflight.IsZero()
	due := time.Since(l.written) >= l.s.cfg.ReservationTTL/3 && (!l.grant.IsZero() || !l.unflushed.IsZero())
	l.busy = false
	l.mu.Unlock()
	if idle {
		return l.giveBack(ctx)
	}
	if !due {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return nil
	}
	soft, err := l.keep(ctx, false)
	l.soft = append(l.soft, soft...)
	return err
}
