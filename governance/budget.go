package governance

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Nanos is an amount of US dollars in nano-dollars (1e-9 USD): sums of
// many small costs stay exact.
type Nanos int64

// NanosPerUSD is one dollar.
const NanosPerUSD = 1_000_000_000

// MaxUSD bounds a money limit (a million dollars): sums of limits and
// reservations never overflow.
const MaxUSD = 1_000_000

// USD converts dollars to Nanos, rounded to the nearest nano-dollar;
// negative, NaN and amounts over MaxUSD give ErrBadAmount.
func USD(dollars float64) (Nanos, error) {
	if math.IsNaN(dollars) || dollars < 0 || dollars > MaxUSD {
		return 0, fmt.Errorf("%w: $%v (0 to %d)", ErrBadAmount, dollars, MaxUSD)
	}
	return Nanos(math.Round(dollars * NanosPerUSD)), nil
}

// Dollars is n in dollars.
func (n Nanos) Dollars() float64 { return float64(n) / NanosPerUSD }

// String is n as "$1.2345" (to the hundredth of a cent, more when smaller).
func (n Nanos) String() string {
	d := n.Dollars()
	if d != 0 && math.Abs(d) < 0.0001 {
		return "$" + strconv.FormatFloat(d, 'g', 3, 64)
	}
	return "$" + strconv.FormatFloat(d, 'f', 4, 64)
}

// MaxCount bounds a token or turn limit.
const MaxCount = 1 << 50

// Errors callers branch on.
var (
	ErrBadAmount = errors.New("governance: bad amount")
	ErrBadLimits = errors.New("governance: bad limits")
)

// Amount is what a budget counts: money, tokens (input, output and cache,
// all alike) and turns.
type Amount struct {
	USD    Nanos `json:"usd,omitempty"`
	Tokens int64 `json:"tokens,omitempty"`
	Turns  int64 `json:"turns,omitempty"`
}

// Add is a+b.
func (a Amount) Add(b Amount) Amount {
	return Amount{USD: a.USD + b.USD, Tokens: a.Tokens + b.Tokens, Turns: a.Turns + b.Turns}
}

// IsZero reports an empty amount.
func (a Amount) IsZero() bool { return a == Amount{} }

// Limits is a budget as an operator sets it: a limit per dimension (zero =
// that dimension is not limited), its window and its soft limit.
type Limits struct {
	Max    Amount `json:"max"`
	Window Window `json:"window,omitzero"`
	// SoftPct is the soft limit, a percentage of each limit (1-99; 0 =
	// none): the settle that first brings a dimension's use to it says so
	// (Settled.Soft), once per crossing.
	SoftPct int `json:"softPct,omitempty"`
	// Rate makes the budget a provider rate limit (rate.go): its window is
	// RateWindow, and a call that does not fit waits for the window to
	// move on (ExceededError.Free); it never pauses anything.
	Rate bool `json:"rate,omitempty"`
}

// Validate reports what is wrong with l.
func (l Limits) Validate() error {
	switch {
	case l.Max.USD < 0 || l.Max.USD > MaxUSD*NanosPerUSD:
		return fmt.Errorf("%w: money limit %s", ErrBadLimits, l.Max.USD)
	case l.Max.Tokens < 0 || l.Max.Tokens > MaxCount, l.Max.Turns < 0 || l.Max.Turns > MaxCount:
		return fmt.Errorf("%w: token and turn limits are 0 to %d", ErrBadLimits, int64(MaxCount))
	case l.SoftPct < 0 || l.SoftPct > 99:
		return fmt.Errorf("%w: soft limit %d%% (1-99, 0 = none)", ErrBadLimits, l.SoftPct)
	case l.Rate && (l.Window != RateWindow || l.Max.USD != 0):
		return fmt.Errorf("%w: a rate limit counts requests and tokens over %s", ErrBadLimits, RateWindow)
	}
	return l.Window.valid()
}

// Limited reports whether l limits anything.
func (l Limits) Limited() bool { return !l.Max.IsZero() }

// String describes l: "$1.0000, 5000 tokens, 10 turns per day".
func (l Limits) String() string {
	var parts []string
	if l.Max.USD > 0 {
		parts = append(parts, l.Max.USD.String())
	}
	if l.Max.Tokens > 0 {
		parts = append(parts, strconv.FormatInt(l.Max.Tokens, 10)+" tokens")
	}
	if l.Max.Turns > 0 {
		parts = append(parts, strconv.FormatInt(l.Max.Turns, 10)+" turns")
	}
	if len(parts) == 0 {
		return "no limit"
	}
	s := parts[0]
	for _, p := range parts[1:] {
		s += ", " + p
	}
	switch l.Window.Kind {
	case WindowDay:
		s += " a day"
	case WindowMonth:
		s += " a month"
	case WindowRolling:
		s += " per rolling " + l.Window.String()[len("rolling="):]
	default:
		s += " in total"
	}
	return s
}

// Reservation is a model call's worst case, held against a budget while the
// call runs.
type Reservation struct {
	ID     string `json:"id"`
	Worker string `json:"worker"`
	Amount Amount `json:"amount"`
	// Expires (unix ms): the reservation stops counting then unless its
	// worker renewed it, so a dead worker's reservations are released.
	Expires int64 `json:"expires"`
	// Spend is what counts as used when the reservation expires: a
	// worker's lease (lease.go) that admits calls without writing holds
	// use it has not reported, so a dead worker's lease is charged whole
	// rather than spent again. Zero for a call's own reservation.
	Spend Amount `json:"spend,omitzero"`
}

// Slot is one slot of a rolling window: the use settled from Start on.
type Slot struct {
	Start int64  `json:"start"`
	Used  Amount `json:"used"`
}

// Refusal is the reservation that did not fit, which paused the budget's
// sessions: they stay paused while it still would not fit.
type Refusal struct {
	At   int64  `json:"at"` // unix ms
	Need Amount `json:"need"`
}

// State is one budget: its limits and what its window used, the
// reservations held against it and the refusal that paused it.
type State struct {
	Limits Limits `json:"limits"`
	// Start is the fixed window's start (unix ms; 0 for total) that Used
	// counts; a rolling window counts Slots instead.
	Start        int64         `json:"start,omitempty"`
	Used         Amount        `json:"used,omitzero"`
	Slots        []Slot        `json:"slots,omitempty"`
	Reservations []Reservation `json:"reservations,omitempty"`
	Refused      *Refusal      `json:"refused,omitempty"`
	// Waiting (unix ms) is when a call last waited for room that
	// reservations held: workers' leases give back what they hold beyond
	// their calls in flight, and take no more, for a while (lease.go).
	Waiting int64 `json:"waiting,omitempty"`
}

// MaxReservations bounds the reservations one budget holds at once (a
// fleet's calls in flight for one scope): past it a reservation is refused
// as if it did not fit.
const MaxReservations = 4096

// Roll moves s to now: a fixed window that ended starts again from zero
// (and forgets its refusal), a rolling window forgets the slots that left
// it, and expired reservations are dropped. It never changes s's slices in
// place (a State read from a cache stays as it was).
func (s *State) Roll(now time.Time) {
	w := s.Limits.Window
	switch w.Kind {
	case WindowRolling:
		oldest := w.slot(now) - (RollingSlots-1)*w.slotWidth()
		if i := slices.IndexFunc(s.Slots, func(sl Slot) bool { return sl.Start >= oldest }); i != 0 {
			if i < 0 {
				i = len(s.Slots)
			}
			s.Slots = slices.Clone(s.Slots[i:])
		}
		s.Start, s.Used = 0, Amount{}
	default:
		if st := w.start(now); st != s.Start {
			s.Start, s.Used, s.Refused = st, Amount{}, nil
		}
		s.Slots = nil
	}
	ms := now.UnixMilli()
	if slices.ContainsFunc(s.Reservations, func(r Reservation) bool { return r.Expires <= ms }) {
		var spent Amount
		var expired []Reservation
		s.Reservations = slices.DeleteFunc(slices.Clone(s.Reservations), func(r Reservation) bool {
			if r.Expires <= ms {
				spent = spent.Add(r.Spend)
				expired = append(expired, r)
				return true
			}
			return false
		})
		if w.Kind != WindowRolling {
			s.add(spent, now)
			return
		}
		// A rolling window counts a lease's spend when it expired (its
		// calls were made before), not when a write first saw it: a
		// dead worker's lease leaves the window a window after it died.
		for _, r := range expired {
			s.addAt(r.Spend, r.Expires, now)
		}
	}
}

// addAt counts use in the rolling window's slot holding at (unix ms, not
// after now), unless that slot left the window.
func (s *State) addAt(a Amount, at int64, now time.Time) {
	w := s.Limits.Window
	st := w.slot(time.UnixMilli(at))
	if a.IsZero() || st < w.slot(now)-(RollingSlots-1)*w.slotWidth() {
		return
	}
	s.Slots = slices.Clone(s.Slots)
	i, found := slices.BinarySearchFunc(s.Slots, st, func(sl Slot, t int64) int { return int(sl.Start - t) })
	if found {
		s.Slots[i].Used = s.Slots[i].Used.Add(a)
		return
	}
	s.Slots = slices.Insert(s.Slots, i, Slot{Start: st, Used: a})
}

// UsedNow is what the window holding now used (settled calls only).
func (s State) UsedNow(now time.Time) Amount {
	s.Roll(now)
	if s.Limits.Window.Kind != WindowRolling {
		return s.Used
	}
	var a Amount
	for _, sl := range s.Slots {
		a = a.Add(sl.Used)
	}
	return a
}

// ReservedNow is what the live reservations hold at now.
func (s State) ReservedNow(now time.Time) Amount {
	var a Amount
	ms := now.UnixMilli()
	for _, r := range s.Reservations {
		if r.Expires > ms {
			a = a.Add(r.Amount)
		}
	}
	return a
}

// ExceededError is a reservation that does not fit: Dimension ("usd",
// "tokens" or "turns") would pass Limit.
type ExceededError struct {
	Dimension string
	// Limit, Used, Reserved and Need are in the dimension's unit
	// (nano-dollars, tokens or turns).
	Limit, Used, Reserved, Need int64
	// Free (unix ms), for a rate limit, is when the call fits as its
	// window moves on, if nothing else is admitted meanwhile; 0 when that
	// is not enough or the budget is no rate limit.
	Free int64
}

// Held reports whether the call would fit but for the reservations of
// calls in flight: it may fit once they settle, so it waits rather than
// pause the budget.
func (e *ExceededError) Held() bool { return e.Reserved > 0 && e.Used+e.Need <= e.Limit }

// Waits reports whether the call waits rather than pause its budget: it
// is Held, or a rate limit's window will have room for it (Free).
func (e *ExceededError) Waits() bool { return e.Held() || e.Free > 0 }

func (e *ExceededError) Error() string {
	f := func(v int64) string { return strconv.FormatInt(v, 10) }
	unit := " " + e.Dimension
	if e.Dimension == "usd" {
		f, unit = func(v int64) string { return Nanos(v).String() }, ""
	}
	return fmt.Sprintf("governance: %s%s limit reached: %s%s used, %s reserved by calls in flight, this call may take %s",
		f(e.Limit), unit, f(e.Used), unit, f(e.Reserved)+unit, f(e.Need)+unit)
}

// Fits is nil when need fits s at now beside what is used and reserved,
// else the first dimension it would pass (*ExceededError).
func (s State) Fits(need Amount, now time.Time) error {
	used, held := s.UsedNow(now), s.ReservedNow(now)
	dims := []struct {
		name                    string
		limit, used, held, need int64
	}{
		{"usd", int64(s.Limits.Max.USD), int64(used.USD), int64(held.USD), int64(need.USD)},
		{"tokens", s.Limits.Max.Tokens, used.Tokens, held.Tokens, need.Tokens},
		{"turns", s.Limits.Max.Turns, used.Turns, held.Turns, need.Turns},
	}
	for _, d := range dims {
		if d.limit > 0 && d.need > 0 && d.used+d.held+d.need > d.limit {
			return &ExceededError{Dimension: d.name, Limit: d.limit, Used: d.used, Reserved: d.held, Need: d.need, Free: s.freeAt(need, now)}
		}
	}
	return nil
}

// Reserve adds r to s when it fits at now; when it does not, the
// *ExceededError is returned and, unless it only waits for reservations in
// flight (ExceededError.Held), s records the refusal: the budget's
// sessions pause.
// A reservation with r's ID already held is replaced.
func (s *State) Reserve(r Reservation, now time.Time) error {
	s.Roll(now)
	rest := slices.DeleteFunc(slices.Clone(s.Reservations), func(o Reservation) bool { return o.ID == r.ID })
	held := State{Limits: s.Limits, Start: s.Start, Used: s.Used, Slots: s.Slots, Reservations: rest}
	err := held.Fits(r.Amount, now)
	if err == nil && len(rest) >= MaxReservations {
		err = &ExceededError{Dimension: "reservations", Limit: MaxReservations, Reserved: int64(len(rest)), Need: 1}
	}
	if err != nil {
		s.Reservations = rest
		if ex, ok := errors.AsType[*ExceededError](err); !ok || !ex.Waits() {
			s.Refused = &Refusal{At: now.UnixMilli(), Need: r.Amount}
		}
		return err
	}
	s.Reservations = append(rest, r)
	return nil
}

// Renew moves reservation id's expiry to expires; false when s holds no
// such reservation (it expired, or was settled).
func (s *State) Renew(id string, expires int64) bool {
	i := slices.IndexFunc(s.Reservations, func(r Reservation) bool { return r.ID == id })
	if i < 0 {
		return false
	}
	s.Reservations = slices.Clone(s.Reservations)
	s.Reservations[i].Expires = expires
	return true
}

// Settled is what a settle did.
type Settled struct {
	// Soft names the dimensions this settle brought to the soft limit
	// (Limits.SoftPct) from below it.
	Soft []string
}

// Settle replaces reservation id (if s still holds it) with the call's
// real use, counted in the window holding now.
func (s *State) Settle(id string, real Amount, now time.Time) Settled {
	s.Roll(now)
	before := s.UsedNow(now)
	s.Reservations = slices.DeleteFunc(slices.Clone(s.Reservations), func(r Reservation) bool { return r.ID == id })
	if real.IsZero() {
		return Settled{}
	}
	s.add(real, now)
	return Settled{Soft: s.crossed(before, s.UsedNow(now))}
}

// add counts use in the window holding now (s rolled to now).
func (s *State) add(a Amount, now time.Time) {
	if a.IsZero() {
		return
	}
	if s.Limits.Window.Kind == WindowRolling {
		st := s.Limits.Window.slot(now)
		s.Slots = slices.Clone(s.Slots)
		if n := len(s.Slots); n > 0 && s.Slots[n-1].Start == st {
			s.Slots[n-1].Used = s.Slots[n-1].Used.Add(a)
		} else {
			s.Slots = append(s.Slots, Slot{Start: st, Used: a})
		}
		return
	}
	s.Used = s.Used.Add(a)
}

// crossed names the dimensions whose use went from under the soft limit to
// it or over.
func (s *State) crossed(before, after Amount) []string {
	pct := int64(s.Limits.SoftPct)
	if pct <= 0 {
		return nil
	}
	var out []string
	check := func(name string, limit, b, a int64) {
		if limit <= 0 {
			return
		}
		soft := limit / 100 * pct
		if limit < 1<<40 {
			soft = limit * pct / 100
		}
		if b < soft && a >= soft {
			out = append(out, name)
		}
	}
	check("usd", int64(s.Limits.Max.USD), int64(before.USD), int64(after.USD))
	check("tokens", s.Limits.Max.Tokens, before.Tokens, after.Tokens)
	check("turns", s.Limits.Max.Turns, before.Turns, after.Turns)
	return out
}

// Paused reports whether the budget's sessions are paused at now: a
// limit is used up (no call can fit: a session's next message waits
// before its turn starts), or a reservation was refused and would still
// not fit.
func (s State) Paused(now time.Time) bool {
	if !s.Limits.Limited() || s.Limits.Rate {
		return false
	}
	s.Roll(now)
	used, l := s.UsedNow(now), s.Limits.Max
	if l.USD > 0 && used.USD >= l.USD || l.Tokens > 0 && used.Tokens >= l.Tokens || l.Turns > 0 && used.Turns >= l.Turns {
		return true
	}
	return s.Refused != nil && s.Fits(s.Refused.Need, now) != nil
}
