package budgetstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// clock is a settable clock shared by the stores of one test.
type clock struct{ ms atomic.Int64 }

func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

type bundle struct {
	js    jetstream.JetStream
	clock *clock
}

func setup(t *testing.T) bundle {
	t.Helper()
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{}
	c.ms.Store(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixMilli())
	return bundle{js: js, clock: c}
}

func (b bundle) open(t *testing.T, worker string, ttl time.Duration, onChange func(governance.Scope)) *Store {
	t.Helper()
	s, err := Open(t.Context(), b.js, Config{BucketConfig: BucketConfig{Now: b.clock.Now}, Worker: worker, ReservationTTL: ttl, OnChange: onChange})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var acme = governance.Scope{Kind: governance.ScopeTenant, Name: "acme"}

func dollars(t *testing.T, d float64) governance.Nanos {
	t.Helper()
	n, err := governance.USD(d)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Three workers race 64 calls each against one dollar: every reservation
// is a compare-and-set, so what is settled never passes the budget; a call
// that fits but for others in flight waits for them, so the budget is
// spent to the last call that fits, and then it is paused. The same holds
// of a budget on a tenant, an agent and an auth profile.
func TestReserveRaceAcrossWorkers(t *testing.T) {
	t.Parallel()
	for _, sc := range []governance.Scope{acme,
		{Kind: governance.ScopeAgent, Name: "support"},
		{Kind: governance.ScopeProfile, Name: "openai:work"},
	} {
		t.Run(string(sc.Kind), func(t *testing.T) {
			t.Parallel()
			reserveRace(t, sc)
		})
	}
}

func reserveRace(t *testing.T, acme governance.Scope) {
	b := setup(t)
	stores := []*Store{b.open(t, "w1", time.Hour, nil), b.open(t, "w2", time.Hour, nil), b.open(t, "w3", time.Hour, nil)}
	if _, _, err := stores[0].Bucket().Set(t.Context(), acme, governance.Limits{Max: governance.Amount{USD: dollars(t, 1)}}, "test"); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		waitFor(t, func() bool { return s.Limited(acme) })
	}
	worst, real := governance.Amount{USD: dollars(t, 0.03)}, governance.Amount{USD: dollars(t, 0.02)}
	var wg sync.WaitGroup
	var settled, refused atomic.Int64
	for _, s := range stores {
		for range 64 {
			wg.Go(func() {
				h, err := s.Reserve(t.Context(), []governance.Scope{acme}, worst, nil)
				if _, ok := errors.AsType[*ReachedError](err); ok {
					refused.Add(1)
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := h.Settle(t.Context(), real); err != nil {
					t.Error(err)
				}
				settled.Add(1)
			})
		}
	}
	wg.Wait()
	// A lease with a surplus settles in memory and writes later (the
	// pause asks it to, asynchronously); closing the stores gives every
	// lease back, its use written.
	for _, s := range stores {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st, _, err := stores[0].Bucket().Get(t.Context(), acme)
	if err != nil {
		t.Fatal(err)
	}
	used := st.UsedNow(b.clock.Now())
	t.Logf("settled %d calls, refused %d, used %s of $1", settled.Load(), refused.Load(), used.USD)
	if used.USD > dollars(t, 1) || used.USD != governance.Nanos(settled.Load())*real.USD {
		t.Fatalf("used %s for %d settled calls, budget $1", used.USD, settled.Load())
	}
	// Spent to the last call that fits: no room is left for one more
	// worst case (49 calls when each was admitted at its worst case, 50
	// when a lease's surplus let real use fill its grant), and the budget
	// is paused.
	if room := dollars(t, 1) - used.USD; room >= worst.USD || len(st.Reservations) != 0 || !st.Paused(b.clock.Now()) {
		t.Fatalf("settled %d, room left %s (a call needs %s), reservations %v, paused %v", settled.Load(), room, worst.USD, st.Reservations, st.Paused(b.clock.Now()))
	}
}

// A worker that dies mid-call leaves its reservation behind; it stops
// counting once its TTL passes without renewal, and another worker's call
// fits again.
func TestDeadWorkersReservationExpires(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dead, live := b.open(t, "dead", time.Hour, nil), b.open(t, "live", time.Hour, nil)
	if _, _, err := live.Bucket().Set(t.Context(), acme, governance.Limits{Max: governance.Amount{USD: dollars(t, 1)}}, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return dead.Limited(acme) })
	if _, err := dead.Reserve(t.Context(), []governance.Scope{acme}, governance.Amount{USD: dollars(t, 0.9)}, nil); err != nil {
		t.Fatal(err)
	}
	_ = dead.Close() // killed mid-call: no settle, no more renewals
	// The live worker's call would fit but for the dead one's reservation:
	// it waits for it.
	type result struct {
		h   *Hold
		err error
	}
	got := make(chan result, 1)
	go func() {
		h, err := live.Reserve(t.Context(), []governance.Scope{acme}, governance.Amount{USD: dollars(t, 0.2)}, nil)
		got <- result{h, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("reserve beside the dead worker's live reservation returned %v, %v; want it to wait", r.h, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	// The reservation's TTL passes: at the budget's next change the
	// waiting call finds it expired, and fits.
	b.clock.Advance(time.Hour + time.Millisecond)
	if _, _, err := live.Bucket().Set(t.Context(), governance.Scope{Kind: governance.ScopeTenant, Name: "other"}, governance.Limits{Max: governance.Amount{Turns: 1}}, "test"); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("reserve after the dead worker's reservation expired: %v", r.err)
	}
	h := r.h
	if _, err := h.Settle(t.Context(), governance.Amount{USD: dollars(t, 0.1)}); err != nil {
		t.Fatal(err)
	}
	st, _, _ := live.Bucket().Get(t.Context(), acme)
	if len(st.Reservations) != 0 || st.Paused(b.clock.Now()) {
		t.Fatalf("after: reservations %v, paused %v", st.Reservations, st.Paused(b.clock.Now()))
	}
}

// A live worker's hold renews its reservation while the call runs.
func TestHoldRenews(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var changes atomic.Int64
	s := b.open(t, "w1", 60*time.Millisecond, func(governance.Scope) { changes.Add(1) })
	if _, _, err := s.Bucket().Set(t.Context(), acme, governance.Limits{Max: governance.Amount{Turns: 10}}, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.Limited(acme) })
	h, err := s.Reserve(t.Context(), []governance.Scope{acme}, governance.Amount{Turns: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, _, _ := s.Bucket().Get(t.Context(), acme)
	first := st.Reservations[0].Expires
	b.clock.Advance(time.Second) // renewals now write a later expiry
	at := changes.Load()
	waitFor(t, func() bool { return changes.Load() >= at+2 })
	st, _, _ = s.Bucket().Get(t.Context(), acme)
	if len(st.Reservations) != 1 || st.Reservations[0].Expires <= first {
		t.Fatalf("reservations %v, want one renewed past %d", st.Reservations, first)
	}
	if _, err := h.Settle(t.Context(), governance.Amount{Turns: 1}); err != nil {
		t.Fatal(err)
	}
}

// Operators' changes: set raises the limit and ends the pause, reset
// forgets the use; each is audited with who, the old and the new value.
func TestSetResetAudit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, "w1", time.Hour, nil)
	bk := s.Bucket()
	ctx := t.Context()
	if _, _, err := bk.Set(ctx, acme, governance.Limits{Max: governance.Amount{Turns: 1}}, "alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.Limited(acme) })
	h, err := s.Reserve(ctx, []governance.Scope{acme}, governance.Amount{Turns: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = h.Settle(ctx, governance.Amount{Turns: 1})
	if _, err := s.Reserve(ctx, []governance.Scope{acme}, governance.Amount{Turns: 1}, nil); err == nil {
		t.Fatal("a second turn fit a budget of one")
	}
	waitFor(t, func() bool { _, p := s.Paused([]governance.Scope{acme}, b.clock.Now()); return p })
	old, now, err := bk.Set(ctx, acme, governance.Limits{Max: governance.Amount{Turns: 2}}, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if old.Limits.Max.Turns != 1 || now.Limits.Max.Turns != 2 || now.Used.Turns != 1 || now.Paused(b.clock.Now()) {
		t.Fatalf("set: old %+v new %+v", old, now)
	}
	waitFor(t, func() bool { _, p := s.Paused([]governance.Scope{acme}, b.clock.Now()); return !p })
	if _, now, err = bk.Reset(ctx, acme, "carol"); err != nil || !now.UsedNow(b.clock.Now()).IsZero() {
		t.Fatalf("reset: %+v, %v", now, err)
	}
	str, err := b.js.Stream(ctx, AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	var who []string
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := str.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var rec AuditRecord
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			t.Fatal(err)
		}
		who = append(who, rec.Who+" "+rec.Op)
		if seq == 2 && (rec.Old.Limits.Max.Turns != 1 || rec.New.Limits.Max.Turns != 2 || rec.Scope != acme) {
			t.Errorf("audit of the raise: %+v", rec)
		}
	}
	if got := who[0] + ", " + who[1] + ", " + who[2]; got != "alice set, bob set, carol reset" {
		t.Errorf("audit: %s", got)
	}
}

// No budget: Reserve is a cache lookup, nothing is written.
func TestNoBudgetCostsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, "w1", time.Hour, nil)
	h, err := s.Reserve(context.Background(), governance.Scopes("acme", "", "acme:1"), governance.Amount{USD: 1}, nil)
	if h != nil || err != nil {
		t.Fatalf("Reserve without budgets = %v, %v", h, err)
	}
	if _, err := s.Bucket().kv.Get(t.Context(), "tenant.acme"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("key written: %v", err)
	}
}

// waitFor polls cond (the watchers deliver asynchronously).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in a minute")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestQuotaAcrossWorkers: three workers start 30 turns of one tenant whose
// quota is 2 turns at once: never more than 2 run together across them,
// every turn runs (the others wait for a turn to end), and a dead worker's
// holds stop counting at their TTL.
func TestQuotaAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stores := []*Store{b.open(t, "w1", time.Hour, nil), b.open(t, "w2", time.Hour, nil), b.open(t, "w3", time.Hour, nil)}
	if _, _, err := stores[0].Bucket().SetQuota(t.Context(), "acme", governance.Quota{Turns: 2}, "test"); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		waitFor(t, func() bool { return s.Quota("acme").Turns == 2 })
	}
	var running, most, ran atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		s := stores[i%3]
		wg.Go(func() {
			release, err := s.TakeTurn(t.Context(), "acme")
			if err != nil {
				t.Error(err)
				return
			}
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond) // a turn's work
			running.Add(-1)
			ran.Add(1)
			release()
		})
	}
	wg.Wait()
	if ran.Load() != 30 || most.Load() > 2 {
		t.Fatalf("%d turns ran, at most %d at once; want 30, at most 2", ran.Load(), most.Load())
	}
	// A worker that dies holding both turns: they count until their TTL.
	dead := stores[0]
	for range 2 {
		if _, err := dead.TakeTurn(t.Context(), "acme"); err != nil {
			t.Fatal(err)
		}
	}
	_ = dead.Close()
	waitFor(t, func() bool { return stores[1].QuotaFull("acme", b.clock.Now()) })
	b.clock.Advance(time.Hour + time.Millisecond)
	if stores[1].QuotaFull("acme", b.clock.Now()) {
		t.Fatal("a dead worker's turns still hold the quota past their TTL")
	}
	release, err := stores[1].TakeTurn(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	release()
	// No quota: no hold, no write.
	if _, _, err := stores[1].Bucket().SetQuota(t.Context(), "acme", governance.Quota{}, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return stores[1].Quota("acme").Turns == 0 })
	st, _, _ := stores[1].Bucket().GetQuota(t.Context(), "acme")
	if len(st.Holds) != 0 {
		t.Fatalf("holds %v after every turn ended", st.Holds)
	}
}

// TestScopeKeys: every kind of budget scope has a bucket key that names it
// again, and List lists them by kind.
func TestScopeKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bk, err := OpenBucket(t.Context(), b.js, BucketConfig{Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	scopes := []governance.Scope{
		{Kind: governance.ScopeTenant, Name: "acme"},
		{Kind: governance.ScopeAgent, Name: "support"},
		{Kind: governance.ScopeProfile, Name: "anthropic:default"},
		{Kind: governance.ScopeProfile, Name: "openai.work/*"},
		{Kind: governance.ScopeSession, Name: "acme:support:1"},
	}
	for _, sc := range scopes {
		key, err := Key(sc)
		if err != nil {
			t.Fatalf("Key(%v): %v", sc, err)
		}
		if got, ok := scopeOf(key); !ok || got != sc {
			t.Fatalf("scopeOf(%q) = %v, %v; want %v", key, got, ok, sc)
		}
		if _, _, err := bk.Set(t.Context(), sc, governance.Limits{Max: governance.Amount{Turns: 1}}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := bk.List(t.Context(), governance.ScopeTenant, governance.ScopeAgent, governance.ScopeProfile, governance.ScopeSession)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(scopes) || got[0] != scopes[0] || got[1] != scopes[1] || got[4] != scopes[4] {
		t.Fatalf("List = %v, want %v", got, scopes)
	}
	for _, bad := range []governance.Scope{
		{Kind: governance.ScopeAgent, Name: "a b"},
		{Kind: governance.ScopeProfile, Name: ""},
		{Kind: governance.ScopeProfile, Name: "a b"},
		{Kind: governance.ScopeProfile, Name: strings.Repeat("p", governance.MaxProfileLen+1)},
	} {
		if _, err := Key(bad); !errors.Is(err, governance.ErrBadScope) {
			t.Errorf("Key(%v) = %v, want ErrBadScope", bad, err)
		}
	}
}

// TestTakeTurnStoreFails: a turn whose tenant has a quota, when the store
// fails (the bucket deleted mid-run, the server stopped), gets a
// *QuotaUnavailableError naming the tenant within the quota timeout: no
// hold, no silent admission, no wait until the run times out. (Before,
// a stopped server held the turn until its context ended, and the error
// was the bare KV error.)
func TestTakeTurnStoreFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(t *testing.T, srv *natstest.Server, js jetstream.JetStream)
	}{
		{"bucket deleted", func(t *testing.T, _ *natstest.Server, js jetstream.JetStream) {
			if err := js.DeleteKeyValue(t.Context(), DefaultBucket); err != nil {
				t.Fatal(err)
			}
		}},
		{"server stopped", func(_ *testing.T, srv *natstest.Server, _ jetstream.JetStream) {
			srv.Shutdown()
			srv.WaitForShutdown()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			js, err := jetstream.New(natstest.Connect(t, srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(t.Context(), js, Config{Worker: "w1", QuotaTimeout: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if _, _, err := s.Bucket().SetQuota(t.Context(), "acme", governance.Quota{Turns: 2}, "test"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return s.Quota("acme").Turns == 2 })
			tc.fail(t, srv, js)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			release, err := s.TakeTurn(ctx, "acme")
			q, ok := errors.AsType[*QuotaUnavailableError](err)
			if !ok || release != nil || q.Tenant != "acme" || !strings.Contains(err.Error(), "quota store unavailable: tenant acme's quota of turns at once could not be held") {
				t.Fatalf("TakeTurn with the store failed: %v (%T); want a *QuotaUnavailableError", err, err)
			}
			if ctx.Err() != nil {
				t.Fatal("TakeTurn waited for the run's context")
			}
		})
	}
}

// A budget's every update keeps it counted as limited: the count that
// lets a call skip admission when no budget exists never reads zero
// between the old value and the new (a call admitted in that gap ran
// with no budget at all).
func TestLimitedCountNeverDipsOnUpdate(t *testing.T) {
	t.Parallel()
	s := &Store{states: map[governance.Scope]cached{}, changed: make(chan struct{})}
	st := governance.State{Limits: governance.Limits{Max: governance.Amount{USD: dollars(t, 1)}}}
	s.put(acme, st, 1)
	const updates = 20000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for rev := uint64(2); rev <= updates; rev++ {
			s.put(acme, st, rev)
		}
	}()
	dips := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		if !s.Any() || !s.Limited(acme) {
			dips++
		}
	}
	if dips > 0 {
		t.Fatalf("the budget read as unlimited %d times while it was updated", dips)
	}
	// Removing the limit does take it out of the count.
	s.put(acme, governance.State{}, updates+1)
	if s.Any() {
		t.Fatal("a budget with no limit is still counted")
	}
}
