package budgetstore

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// timers is a fake clock whose waits (Config.After) fire when the test
// advances it past their deadline.
type timers struct {
	mu      sync.Mutex
	ms      int64
	pending []fakeTimer
}

type fakeTimer struct {
	at int64
	ch chan time.Time
}

func (c *timers) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.UnixMilli(c.ms)
}

func (c *timers) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.pending = append(c.pending, fakeTimer{at: c.ms + d.Milliseconds(), ch: ch})
	return ch
}

// AdvanceTo moves the clock to ms and fires the timers due.
func (c *timers) AdvanceTo(ms int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ms = max(c.ms, ms)
	rest := c.pending[:0]
	for _, t := range c.pending {
		if t.at <= c.ms {
			t.ch <- time.UnixMilli(c.ms)
			continue
		}
		rest = append(rest, t)
	}
	c.pending = rest
}

// rateSetup starts a server and n stores, each on its own connection (a
// crash closes it), sharing a fake clock; rule is set by the first.
func rateSetup(t *testing.T, n int, ttl time.Duration, rule governance.RateRule) ([]*Store, []*nats.Conn, *timers) {
	t.Helper()
	srv := natstest.Start(t)
	c := &timers{ms: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixMilli()}
	var stores []*Store
	var conns []*nats.Conn
	for i := range n {
		nc := natstest.Connect(t, srv.URL)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(t.Context(), js, Config{BucketConfig: BucketConfig{Now: c.Now}, Worker: "w" + string(rune('1'+i)), ReservationTTL: ttl, After: c.After})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores, conns = append(stores, s), append(conns, nc)
	}
	for _, s := range stores {
		if err := s.SetRate(t.Context(), rule); err != nil {
			t.Fatal(err)
		}
	}
	return stores, conns, c
}

// callers runs calls against a rate limit and tells the test when every
// call not yet admitted has said how long it waits for the window.
type callers struct {
	mu       sync.Mutex
	cond     *sync.Cond
	admitted []int64      // fake clock ms of each admission
	waits    map[int]Wait // the last wait each caller not admitted was told, since the last advance
	left     int
}

func newCallers(n int) *callers {
	c := &callers{waits: map[int]Wait{}, left: n}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *callers) run(t *testing.T, wg *sync.WaitGroup, id int, s *Store, clock *timers, sc governance.Scope) {
	defer wg.Done()
	h, err := s.Reserve(t.Context(), []governance.Scope{sc}, governance.RateNeed(10, 90), func(w Wait) {
		c.mu.Lock()
		c.waits[id] = w
		c.mu.Unlock()
		c.cond.Broadcast()
	})
	if err != nil {
		t.Error(err)
	}
	c.mu.Lock()
	c.admitted = append(c.admitted, clock.Now().UnixMilli())
	delete(c.waits, id)
	c.left--
	c.mu.Unlock()
	c.cond.Broadcast()
	if _, err := h.Settle(t.Context(), governance.RateReal(60)); err != nil {
		t.Error(err)
	}
}

// quiet waits until every caller not admitted waits for the window to
// move on (a wait for calls in flight is followed by one for the window
// once they are written), and returns the latest end of those waits (0
// when every call was admitted).
func (c *callers) quiet() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		known := 0
		var end int64
		for _, w := range c.waits {
			if w.For > 0 {
				known++
				end = max(end, w.Exceeded.Free)
			}
		}
		if c.left == 0 || known == c.left {
			clear(c.waits)
			return end
		}
		c.cond.Wait()
	}
}

// maxInMinute is the most admissions in any 60-second span.
func maxInMinute(at []int64) int {
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	most := 0
	for i := range at {
		j := sort.Search(len(at), func(k int) bool { return at[k] >= at[i]+60_000 })
		most = max(most, j-i)
	}
	return most
}

// TestRateLimitAcrossWorkers: three workers make 3N calls at once under
// a limit of N requests a minute. The first N are admitted at once; the
// rest wait (each told how long, for the window), and no 60-second span
// ever holds more than N admissions, though the workers admit from
// leases in memory. (Before, there was no rate limit: all 3N ran at
// once.)
func TestRateLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	const n = 20
	rule := governance.RateRule{Pattern: "openai/*", Limit: governance.RateLimit{RPM: n}}
	stores, _, clock := rateSetup(t, 3, time.Hour, rule)
	start := clock.Now().UnixMilli()
	c := newCallers(3 * n)
	var wg sync.WaitGroup
	for i := range 3 * n {
		wg.Add(1)
		go c.run(t, &wg, i, stores[i%3], clock, rule.Scope())
	}
	for rounds := 0; ; rounds++ {
		end := c.quiet()
		if end == 0 {
			break
		}
		if rounds > 20 {
			t.Fatalf("still %d calls waiting after %d rounds", c.left, rounds)
		}
		clock.AdvanceTo(end)
	}
	wg.Wait()
	first := 0
	for _, at := range c.admitted {
		if at == start {
			first++
		}
	}
	if first != n {
		t.Errorf("admitted at once: %d; want the limit, %d", first, n)
	}
	if got := maxInMinute(c.admitted); got > n {
		t.Errorf("a 60-second span holds %d admissions; want at most %d", got, n)
	}
	if len(c.admitted) != 3*n {
		t.Errorf("admitted %d calls; want %d", len(c.admitted), 3*n)
	}
}

// TestRateLimitDeadWorkersLease: a worker that dies holding a lease with
// a surplus leaks no more than that lease: the others admit the rest of
// the window at once, and the lease, charged as spent when its TTL
// passes, leaves the window with it.
func TestRateLimitDeadWorkersLease(t *testing.T) {
	t.Parallel()
	const n, ttl = 40, 10 * time.Second
	rule := governance.RateRule{Pattern: "anthropic/*", Limit: governance.RateLimit{RPM: n}}
	stores, conns, clock := rateSetup(t, 2, ttl, rule)
	dead, live := stores[0], stores[1]
	need := governance.RateNeed(10, 90)
	h, err := dead.Reserve(t.Context(), []governance.Scope{rule.Scope()}, need, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = h // mid-call when it dies: never settled
	st, _, err := dead.Bucket().Get(t.Context(), rule.Scope())
	if err != nil || len(st.Reservations) != 1 {
		t.Fatalf("the dead worker's lease: %+v, %v", st.Reservations, err)
	}
	lease := st.Reservations[0].Amount.Turns
	if lease <= 1 {
		t.Fatalf("the lease holds %d requests; want a surplus", lease)
	}
	conns[0].Close() // killed: its lease is neither given back nor renewed
	_ = dead.Close()

	admit := func(k int) {
		t.Helper()
		for i := range k {
			h, err := live.Reserve(t.Context(), []governance.Scope{rule.Scope()}, need, func(w Wait) {
				t.Errorf("call %d of %d waits (%+v); want room", i+1, k, w.Exceeded)
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.Settle(t.Context(), governance.RateReal(60)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The window's room but the dead lease is the live worker's now.
	admit(n - int(lease))
	// The live worker gives its lease back once idle (its use written).
	waitFor(t, func() bool {
		st, _, err := live.Bucket().Get(t.Context(), rule.Scope())
		return err == nil && len(st.Reservations) == 1 && st.UsedNow(clock.Now()).Turns == int64(n)-lease
	})
	// Past the lease's TTL it counts as spent in the window when it
	// expired; a window later the whole limit is back.
	clock.AdvanceTo(clock.Now().Add(ttl + governance.RateWindow.Rolling + 2*time.Second).UnixMilli())
	admit(n)
	st, _, err = live.Bucket().Get(t.Context(), rule.Scope())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.UsedNow(clock.Now()).Turns + st.ReservedNow(clock.Now()).Turns; got > n {
		t.Errorf("the window counts %d requests; want at most %d", got, n)
	}
}

// TestRateLimitLoweredByProvider: a provider's headers saying fewer
// requests are left than the fleet's window has room for lower its room
// until they say it resets; a count that is not tighter writes nothing.
func TestRateLimitLoweredByProvider(t *testing.T) {
	t.Parallel()
	rule := governance.RateRule{Pattern: "profile:openai:work", Limit: governance.RateLimit{RPM: 10, TPM: 100_000}}
	stores, _, clock := rateSetup(t, 1, time.Hour, rule)
	s, sc := stores[0], rule.Scope()
	if err := s.Lower(t.Context(), sc, 50, -1, clock.Now().Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := s.Bucket().Get(t.Context(), sc); len(st.Reservations) != 0 {
		t.Fatalf("a looser provider count wrote %+v", st.Reservations)
	}
	reset := clock.Now().Add(30 * time.Second)
	if err := s.Lower(t.Context(), sc, 2, -1, reset); err != nil {
		t.Fatal(err)
	}
	need := governance.RateNeed(10, 90)
	for range 2 {
		h, err := s.Reserve(t.Context(), []governance.Scope{sc}, need, func(w Wait) { t.Errorf("waits within the provider's count: %+v", w.Exceeded) })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Settle(t.Context(), governance.RateReal(100)); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan Wait, 1)
	done := make(chan error, 1)
	go func() {
		_, err := s.Reserve(t.Context(), []governance.Scope{sc}, need, func(w Wait) {
			if w.For > 0 {
				select {
				case waited <- w:
				default:
				}
			}
		})
		done <- err
	}()
	w := <-waited
	if w.Exceeded.Free != reset.UnixMilli() {
		t.Fatalf("the third call waits until %v; want the provider's reset, %v", time.UnixMilli(w.Exceeded.Free), reset)
	}
	clock.AdvanceTo(reset.UnixMilli())
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
