package governance

import (
	"errors"
	"slices"
	"time"
)

// A worker does not write a budget at every model call: it holds a lease,
// one reservation of a chunk of the budget, admits its calls against the
// chunk in memory and writes only to take a bigger chunk, to report what
// its calls used, to renew the lease and to give it back. The chunk is
// taken only from room that exists (Used plus every reservation plus the
// chunk within each limit), so the fleet never admits more than the
// budget holds, however many workers share it.
//
// A chunk is the call that needs it plus up to LeaseCalls more calls like
// it, never more than 1/LeaseShare of the room left after the call: near
// the cap chunks shrink to the call's own worst case, and every call's use
// is written when it settles (as it would be without leases). While a call
// waits for room that reservations hold (State.Waiting) or the budget is
// paused, no chunk takes more than its call.
const (
	LeaseCalls = 32
	LeaseShare = 8
)

// Lease is a worker's lease on one budget as a write sees it.
type Lease struct {
	ID, Worker string
	// InFlight is the worst case of the worker's calls admitted against
	// the lease and not yet settled: it stays held whatever the write.
	InFlight Amount
	// Expires is the expiry the write gives the lease's reservation.
	Expires int64
}

// Holds reports whether s, rolled to now, still holds reservation id (a
// lease that expired was charged its Spend).
func (s *State) Holds(id string, now time.Time) bool {
	s.Roll(now)
	return slices.ContainsFunc(s.Reservations, func(r Reservation) bool { return r.ID == id })
}

// Take reports used (what the lease's calls used since its last write)
// and takes room for a call of need beside the lease's calls in flight.
// The lease's reservation becomes its grant: InFlight + need, plus the
// surplus the room allows when surplus is true (and no call waits, and
// the budget is not paused). A grant with a surplus Spends all of itself
// if it expires. When need does not fit, the lease keeps InFlight and the
// *ExceededError is returned, recorded as Reserve records it: a refusal
// pauses the budget; a call that fits but for reservations marks Waiting
// (when it is older than waitFresh), so leases give back their surplus.
func (s *State) Take(l Lease, used, need Amount, surplus bool, waitFresh time.Duration, now time.Time) (grant Amount, settled Settled, err error) {
	settled = s.Settle(l.ID, used, now)
	base := State{Limits: s.Limits, Start: s.Start, Used: s.Used, Slots: s.Slots, Reservations: s.Reservations}
	if !l.InFlight.IsZero() {
		base.Reservations = append(slices.Clone(s.Reservations), Reservation{ID: l.ID, Worker: l.Worker, Amount: l.InFlight, Expires: l.Expires})
	}
	err = base.Fits(need, now)
	if err == nil && len(s.Reservations) >= MaxReservations {
		err = &ExceededError{Dimension: "reservations", Limit: MaxReservations, Reserved: int64(len(s.Reservations)), Need: 1}
	}
	if err != nil {
		s.Reservations = base.Reservations
		ex, ok := errors.AsType[*ExceededError](err)
		switch {
		case ok && ex.Held():
			if ms := now.UnixMilli(); ms-s.Waiting >= waitFresh.Milliseconds() {
				s.Waiting = ms
			}
		case !ok || !ex.Waits():
			s.Refused = &Refusal{At: now.UnixMilli(), Need: need}
		}
		return l.InFlight, settled, err
	}
	k := int64(0)
	if surplus && s.Refused == nil && now.UnixMilli()-s.Waiting >= waitFresh.Milliseconds() {
		k = base.surplusCalls(need, now)
	}
	grant = l.InFlight.Add(need.times(1 + k))
	r := Reservation{ID: l.ID, Worker: l.Worker, Amount: grant, Expires: l.Expires}
	if k > 0 {
		r.Spend = grant
	}
	s.Reservations = append(slices.Clip(s.Reservations), r)
	return grant, settled, nil
}

// Keep reports used and makes the lease's reservation keep (none when
// zero), which Spends all of itself if it expires when spend is set.
func (s *State) Keep(l Lease, used, keep Amount, spend bool, now time.Time) Settled {
	settled := s.Settle(l.ID, used, now)
	if !keep.IsZero() {
		r := Reservation{ID: l.ID, Worker: l.Worker, Amount: keep, Expires: l.Expires}
		if spend {
			r.Spend = keep
		}
		s.Reservations = append(s.Reservations, r)
	}
	return settled
}

// surplusCalls is how many more calls of need a chunk may take beside
// one: at most LeaseCalls, and within 1/LeaseShare of the room each
// limited dimension has left after the call.
func (s State) surplusCalls(need Amount, now time.Time) int64 {
	used, held := s.UsedNow(now), s.ReservedNow(now)
	k := int64(LeaseCalls)
	dim := func(limit, used, held, need int64) {
		if limit <= 0 || need <= 0 {
			return
		}
		room := limit - used - held - need
		k = min(k, max(room, 0)/LeaseShare/need)
	}
	dim(int64(s.Limits.Max.USD), int64(used.USD), int64(held.USD), int64(need.USD))
	dim(s.Limits.Max.Tokens, used.Tokens, held.Tokens, need.Tokens)
	dim(s.Limits.Max.Turns, used.Turns, held.Turns, need.Turns)
	return k
}

// times is a scaled by n.
func (a Amount) times(n int64) Amount {
	return Amount{USD: a.USD * Nanos(n), Tokens: a.Tokens * n, Turns: a.Turns * n}
}

// Within reports whether a fits in b in every dimension limits limits
// (a lease's local admission: its calls in flight, their use and the next
// call within its grant).
func (a Amount) Within(b Amount, limits Amount) bool {
	return (limits.USD <= 0 || a.USD <= b.USD) &&
		(limits.Tokens <= 0 || a.Tokens <= b.Tokens) &&
		(limits.Turns <= 0 || a.Turns <= b.Turns)
}

// Sub is a-b.
func (a Amount) Sub(b Amount) Amount {
	return Amount{USD: a.USD - b.USD, Tokens: a.Tokens - b.Tokens, Turns: a.Turns - b.Turns}
}

// SoftCrossed reports whether adding a to from crosses the soft limit of
// l in a dimension (a worker's own estimate: it writes then, so the write
// says exactly which).
func (l Limits) SoftCrossed(from, a Amount) bool {
	s := State{Limits: l}
	return len(s.crossed(from, from.Add(a))) > 0
}
