package governance

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

func TestTenant(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", MaxNameLen)
	cases := []struct {
		rule TenantRule
		key  string
		want string
	}{
		{TenantRule{}, "acme:support:42", "acme"},            // the prefix up to the first ':'
		{TenantRule{}, "acme", ""},                           // no separator: no tenant
		{TenantRule{}, ":x", ""},                             // an empty prefix is no name
		{TenantRule{}, "ac me:x", ""},                        // a prefix that is not a name: no tenant
		{TenantRule{}, "ac.me:x", ""},                        // '.' would be a subject token separator
		{TenantRule{}, long + ":x", long},                    // 64 characters is a name
		{TenantRule{}, long + "a:x", ""},                     // 65 is not
		{TenantRule{}, strings.Repeat("a", 1<<20) + ":", ""}, // a huge key is scanned only as far as a name goes
		{TenantRule{Separator: "/"}, "acme/x:y", "acme"},     // a configured separator
		{TenantRule{Separator: "/"}, "acme:x", ""},
		{TenantRule{Off: true}, "acme:x", ""},
	}
	for _, c := range cases {
		if got := c.rule.Tenant(c.key); got != c.want {
			t.Errorf("%+v.Tenant(%.40q) = %q, want %q", c.rule, c.key, got, c.want)
		}
	}
}

func TestParseWindow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Window
		err  bool
	}{
		{"", Window{Kind: WindowTotal}, false},
		{"total", Window{Kind: WindowTotal}, false},
		{"day", Window{Kind: WindowDay}, false},
		{"month", Window{Kind: WindowMonth}, false},
		{"rolling=1h", Window{Kind: WindowRolling, Rolling: time.Hour}, false},
		{"rolling=7d", Window{Kind: WindowRolling, Rolling: 7 * 24 * time.Hour}, false},
		{"rolling=30s", Window{}, true},  // under a minute
		{"rolling=400d", Window{}, true}, // over 366 days
		{"rolling=-1h", Window{}, true},
		{"rolling=1x", Window{}, true},
		{"rolling=07d", Window{}, true}, // not canonical
		{"week", Window{}, true},
	}
	for _, c := range cases {
		got, err := ParseWindow(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseWindow(%q) = %+v, %v; want %+v, err %v", c.in, got, err, c.want, c.err)
		}
		if err == nil {
			if back, _ := ParseWindow(got.String()); back != got {
				t.Errorf("ParseWindow(%q).String() = %q does not read back", c.in, got.String())
			}
		}
		if err != nil && !errors.Is(err, ErrBadWindow) {
			t.Errorf("ParseWindow(%q) error %v is not ErrBadWindow", c.in, err)
		}
	}
}

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func usd(t *testing.T, d float64) Nanos {
	t.Helper()
	n, err := USD(d)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReserveSettle(t *testing.T) {
	t.Parallel()
	dollar := usd(t, 1)
	cent := usd(t, 0.01)
	res := func(id string, a Amount, expires time.Time) Reservation {
		return Reservation{ID: id, Worker: "w1", Amount: a, Expires: expires.UnixMilli()}
	}
	later := t0.Add(time.Minute)
	cases := []struct {
		name   string
		state  State
		r      Reservation
		at     time.Time
		dim    string // "" = fits
		paused bool   // after the refusal
	}{
		{"fits an empty budget", State{Limits: Limits{Max: Amount{USD: dollar}}}, res("a", Amount{USD: 10 * cent}, later), t0, "", false},
		{"exactly the rest fits", State{Limits: Limits{Max: Amount{USD: dollar}}, Used: Amount{USD: 90 * cent}}, res("a", Amount{USD: 10 * cent}, later), t0, "", false},
		{"a nano-dollar over does not", State{Limits: Limits{Max: Amount{USD: dollar}}, Used: Amount{USD: 90*cent + 1}}, res("a", Amount{USD: 10 * cent}, later), t0, "usd", true},
		{"live reservations count (the call waits for them: no pause)", State{Limits: Limits{Max: Amount{USD: dollar}}, Reservations: []Reservation{res("b", Amount{USD: 95 * cent}, later)}},
			res("a", Amount{USD: 10 * cent}, later), t0, "usd", false},
		{"a call that would not fit without them pauses", State{Limits: Limits{Max: Amount{USD: dollar}}, Used: Amount{USD: 91 * cent}, Reservations: []Reservation{res("b", Amount{USD: 5 * cent}, later)}},
			res("a", Amount{USD: 10 * cent}, later), t0, "usd", true},
		{"expired reservations do not (a dead worker's)", State{Limits: Limits{Max: Amount{USD: dollar}}, Reservations: []Reservation{res("b", Amount{USD: 95 * cent}, t0)}},
			res("a", Amount{USD: 10 * cent}, later), t0, "", false},
		{"a reservation replaces its own id", State{Limits: Limits{Max: Amount{USD: dollar}}, Reservations: []Reservation{res("a", Amount{USD: 95 * cent}, later)}},
			res("a", Amount{USD: 10 * cent}, later), t0, "", false},
		{"tokens", State{Limits: Limits{Max: Amount{Tokens: 1000}}, Used: Amount{Tokens: 900}}, res("a", Amount{Tokens: 101}, later), t0, "tokens", true},
		{"turns", State{Limits: Limits{Max: Amount{Turns: 3}}, Used: Amount{Turns: 2}, Reservations: []Reservation{res("b", Amount{Turns: 1}, later)}},
			res("a", Amount{Turns: 1}, later), t0, "turns", false},
		{"a used-up limit pauses", State{Limits: Limits{Max: Amount{Turns: 3}}, Used: Amount{Turns: 3}}, res("a", Amount{Turns: 1}, later), t0, "turns", true},
		{"a later call of a turn needs no turn (paused for the next turn all the same)", State{Limits: Limits{Max: Amount{Turns: 3}}, Used: Amount{Turns: 3}}, res("a", Amount{Tokens: 5}, later), t0, "", true},
		{"an unlimited dimension never refuses", State{Limits: Limits{Max: Amount{Turns: 3}}}, res("a", Amount{USD: 1 << 40}, later), t0, "", false},
		{"a new day starts from zero", State{Limits: Limits{Max: Amount{USD: dollar}, Window: Window{Kind: WindowDay}}, Start: t0.Add(-24 * time.Hour).Truncate(24 * time.Hour).UnixMilli(), Used: Amount{USD: dollar}},
			res("a", Amount{USD: cent}, later), t0, "", false},
		{"the same day does not", State{Limits: Limits{Max: Amount{USD: dollar}, Window: Window{Kind: WindowDay}}, Start: t0.Truncate(24 * time.Hour).UnixMilli(), Used: Amount{USD: dollar}},
			res("a", Amount{USD: cent}, later), t0, "usd", true},
		{"a new month starts from zero", State{Limits: Limits{Max: Amount{USD: dollar}, Window: Window{Kind: WindowMonth}}, Start: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), Used: Amount{USD: dollar}},
			res("a", Amount{USD: cent}, later), t0, "", false},
		{"a rolling window forgets slots that left it", State{Limits: Limits{Max: Amount{USD: dollar}, Window: Window{Kind: WindowRolling, Rolling: time.Hour}},
			Slots: []Slot{{Start: t0.Add(-61 * time.Minute).UnixMilli(), Used: Amount{USD: dollar}}}}, res("a", Amount{USD: cent}, later), t0, "", false},
		{"and keeps those within it", State{Limits: Limits{Max: Amount{USD: dollar}, Window: Window{Kind: WindowRolling, Rolling: time.Hour}},
			Slots: []Slot{{Start: t0.Add(-59 * time.Minute).UnixMilli(), Used: Amount{USD: dollar}}}}, res("a", Amount{USD: cent}, later), t0, "usd", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			before := c.state.Reservations
			s := c.state
			err := s.Reserve(c.r, c.at)
			var ex *ExceededError
			switch {
			case c.dim == "" && err != nil:
				t.Fatalf("Reserve: %v, want it to fit", err)
			case c.dim != "" && (!errors.As(err, &ex) || ex.Dimension != c.dim):
				t.Fatalf("Reserve: %v, want %s exceeded", err, c.dim)
			}
			if got := s.Paused(c.at); got != c.paused {
				t.Errorf("Paused = %v, want %v", got, c.paused)
			}
			if len(before) > 0 && &before[0] == &s.Reservations[0] {
				t.Error("Reserve changed the state's slice in place")
			}
		})
	}
}

func TestSettleAndResume(t *testing.T) {
	t.Parallel()
	dollar, cent := usd(t, 1), usd(t, 0.01)
	s := State{Limits: Limits{Max: Amount{USD: dollar}, SoftPct: 80}}
	exp := t0.Add(time.Minute).UnixMilli()
	if err := s.Reserve(Reservation{ID: "a", Amount: Amount{USD: 60 * cent}, Expires: exp}, t0); err != nil {
		t.Fatal(err)
	}
	// A second call's worst case does not fit beside the first's: it
	// waits (Held), the budget is not paused.
	err := s.Reserve(Reservation{ID: "b", Amount: Amount{USD: 50 * cent}, Expires: exp}, t0)
	if ex, ok := errors.AsType[*ExceededError](err); !ok || !ex.Held() || s.Paused(t0) {
		t.Fatalf("second reservation: %v, paused %v; want held, not paused", err, s.Paused(t0))
	}
	// A refusal would fit once a reservation settles for less: the
	// pause ends then.
	s.Refused = &Refusal{At: t0.UnixMilli(), Need: Amount{USD: 50 * cent}}
	if !s.Paused(t0) {
		t.Fatal("not paused by a refusal that does not fit")
	}
	if st := s.Settle("a", Amount{USD: 30 * cent, Tokens: 10}, t0); len(st.Soft) != 0 {
		t.Errorf("settle under the soft limit warned %v", st.Soft)
	}
	if s.Paused(t0) || len(s.Reservations) != 0 || s.UsedNow(t0).USD != 30*cent {
		t.Fatalf("after settle: paused %v, reservations %v, used %v", s.Paused(t0), s.Reservations, s.UsedNow(t0))
	}
	// The settle that crosses 80% warns once.
	if st := s.Settle("x", Amount{USD: 50 * cent}, t0); len(st.Soft) != 1 || st.Soft[0] != "usd" {
		t.Errorf("crossing settle: soft %v, want [usd]", st.Soft)
	}
	if st := s.Settle("y", Amount{USD: cent}, t0); len(st.Soft) != 0 {
		t.Errorf("settle past the soft limit warned again: %v", st.Soft)
	}
	// Raising the limit resumes a paused budget.
	_ = s.Reserve(Reservation{ID: "c", Amount: Amount{USD: 50 * cent}, Expires: exp}, t0)
	if !s.Paused(t0) {
		t.Fatal("not paused at the cap")
	}
	s.Limits.Max.USD = 2 * dollar
	if s.Paused(t0) {
		t.Fatal("still paused after the limit was raised")
	}
	// Renew keeps a reservation past its first expiry; one that is gone
	// cannot be renewed.
	_ = s.Reserve(Reservation{ID: "d", Amount: Amount{USD: cent}, Expires: exp}, t0)
	if !s.Renew("d", exp+60_000) || s.Renew("nope", exp) {
		t.Fatal("Renew")
	}
	if got := s.ReservedNow(t0.Add(90 * time.Second)); got.USD != cent {
		t.Errorf("renewed reservation holds %v at 90 s, want %v", got.USD, cent)
	}
}

func TestPrice(t *testing.T) {
	t.Parallel()
	cost := provider.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}
	// 1000 input tokens at the cache-write price (the dearer), 2000 output.
	wc := WorstCase(cost, 1000, 2000, true)
	if want := (Amount{USD: 3_750_000 + 30_000_000, Tokens: 3000, Turns: 1}); wc != want {
		t.Errorf("WorstCase = %+v, want %+v", wc, want)
	}
	re := Real(cost, message.Usage{Input: 100, Output: 10, CacheRead: 1000}, false)
	if want := (Amount{USD: 300_000 + 150_000 + 300_000, Tokens: 1110}); re != want {
		t.Errorf("Real = %+v, want %+v", re, want)
	}
	if got := WorstCase(provider.ModelCost{Input: 1e-9}, 1, 0, false).USD; got != 1 {
		t.Errorf("a fraction of a nano-dollar reserves %d, want 1 (rounded up)", got)
	}
}

func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	bad := []Limits{
		{Max: Amount{USD: -1}},
		{Max: Amount{Tokens: -1}},
		{Max: Amount{Turns: MaxCount + 1}},
		{SoftPct: 100},
		{Window: Window{Kind: "week"}},
		{Window: Window{Kind: WindowRolling}},
	}
	for _, l := range bad {
		if err := l.Validate(); !errors.Is(err, ErrBadLimits) && !errors.Is(err, ErrBadWindow) {
			t.Errorf("Validate(%+v) = %v, want an error", l, err)
		}
	}
	if _, err := USD(-0.5); !errors.Is(err, ErrBadAmount) {
		t.Errorf("USD(-0.5) = %v", err)
	}
	if got := (Limits{Max: Amount{USD: usd(t, 1), Turns: 10}, Window: Window{Kind: WindowDay}}).String(); got != "$1.0000, 10 turns a day" {
		t.Errorf("String = %q", got)
	}
}

func TestParseWindowDaysOverflow(t *testing.T) {
	for _, s := range []string{"rolling=367d", "rolling=213504d"} {
		if w, err := ParseWindow(s); !errors.Is(err, ErrBadWindow) {
			t.Errorf("ParseWindow(%q) = %v, %v; want ErrBadWindow", s, w, err)
		}
	}
	if w, err := ParseWindow("rolling=366d"); err != nil || w.Rolling != RollingMax {
		t.Errorf("ParseWindow(rolling=366d) = %v, %v", w, err)
	}
}
