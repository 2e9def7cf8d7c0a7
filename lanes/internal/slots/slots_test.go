package slots

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSlotsOverBudgetNeed: a lane an owner let go over the byte budget is
// charged what its next message needs, whether its delivery takes a free
// slot or waits in line, until a slot is handed to it; a lane that went
// elsewhere is forgotten with its place.
func TestSlotsOverBudgetNeed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	s := New(4, 100, Shares{})
	hog, ok := s.Take("hog", 60, at(0))
	if !ok || hog != 60 {
		t.Fatalf("hog: took %d, %v", hog, ok)
	}
	s.OverBudget("big", 50, at(0))
	if _, ok := s.Take("big", 1, at(0)); ok {
		t.Fatal("a lane needing 50 bytes took a slot with 40 free")
	}
	w, b, res := s.Wait("big", 1, at(1), false)
	if res != JoinQueued || b != 50 || w.Charged() != 50 {
		t.Fatalf("big waits: %v charged %d, want JoinQueued charged 50", res, b)
	}
	if _, ok := s.Take("small", 1, at(1)); ok {
		t.Fatal("a small lane passed the large one waiting for bytes")
	}
	s.Put("", hog, time.Time{})
	select {
	case <-w.Granted():
	default:
		t.Fatal("the bytes came back and the large lane did not get them")
	}
	if got := s.UsedBytes(); got != 50 {
		t.Fatalf("%d bytes in use, want the large lane's 50", got)
	}
	s.Put("", 50, time.Time{})
	// Granted: the lane needs no more than its payload again.
	if b, ok := s.Take("big", 1, at(2)); !ok || b != 1 {
		t.Fatalf("big after its turn: took %d, %v; want 1", b, ok)
	}
	s.Put("", 1, time.Time{})

	// A free slot with room: the delivery takes it, charged the need, and
	// the need is spent.
	s.OverBudget("mid", 30, at(2))
	if b, ok := s.Take("mid", 1, at(2)); !ok || b != 30 {
		t.Fatalf("mid: took %d, %v; want 30", b, ok)
	}
	s.Put("", 30, time.Time{})
	if b, _ := s.Take("mid", 1, at(2)); b != 1 {
		t.Fatalf("mid again: charged %d, want 1", b)
	}
	s.Put("", 1, time.Time{})

	if s.Known("mid", at(2)) {
		t.Fatal("a lane that took a slot kept its place")
	}

	// A lane whose trigger went to another worker is forgotten with its
	// place when the next lane is let go, and is not charged its need
	// even before that (no lane let go: no pruning).
	s.OverBudget("gone", 90, at(3))
	later := at(3).Add(placeKept + 2*time.Second)
	if s.Known("gone", later) {
		t.Fatal("the place of a lane that went elsewhere counts")
	}
	if b, _ := s.Take("gone", 1, later); b != 1 {
		t.Fatalf("gone: charged %d, want 1", b)
	}
	s.Put("", 1, time.Time{})
	s.OverBudget("gone", 90, at(3))
	s.OverBudget("next", 90, later)
	if _, kept := s.lanes["gone"]; kept {
		t.Fatal("the place of a lane that went elsewhere was kept")
	}
}

// TestSlotsNeedIsNotPayload: what an over-budget lane needs is what its
// slot is charged, not what its waiting delivery holds: the line, bounded
// to the budget's worth of payloads, still takes other lanes behind it.
// A delivery of the lane already waiting when its owner lets it go is
// charged the need too.
func TestSlotsNeedIsNotPayload(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	s := New(4, 100, Shares{})
	hog, _ := s.Take("hog", 10, at(0))
	s.OverBudget("big", 100, at(0))
	big, b, res := s.Wait("big", 1, at(1), false)
	if res != JoinQueued || b != 100 {
		t.Fatalf("big: %v charged %d", res, b)
	}
	other, _, res := s.Wait("other", 5, at(2), false)
	if res != JoinQueued {
		t.Fatalf("a small lane behind one needing the whole budget: %v, want JoinQueued", res)
	}
	q, _, _ := s.Wait("queued", 1, at(3), false)
	s.OverBudget("queued", 60, at(4))
	if q.bytes != 60 {
		t.Fatalf("a waiting delivery of a lane let go over the budget is charged %d, want 60", q.bytes)
	}
	s.Put("", hog, time.Time{})
	for _, w := range []*Waiter{big, other, q} {
		select {
		case <-w.Granted():
		default:
			t.Fatalf("%s not granted after the budget came back", w.token)
		}
		s.Put("", w.Charged(), time.Time{})
	}
	if s.UsedBytes() != 0 || s.waitB != 0 {
		t.Fatalf("left charged: %d in use, %d waiting", s.UsedBytes(), s.waitB)
	}
}

// TestSlotsLine: the line of deliveries waiting for a slot is ordered by
// when their lane began to wait; a lane handed back keeps its place for its
// redelivery; a second delivery of a waiting lane joins it (and is counted
// as its dependent); a yielded lane
// goes to the end; past the bound a delivery is refused.
func TestSlotsLine(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	s := New(1, -1, Shares{}) // one slot, four may wait, no byte budget
	take := func() bool { _, ok := s.Take("", 0, time.Time{}); return ok }
	if !take() || take() {
		t.Fatal("one slot: the first take gets it, the second does not")
	}
	a, _, res := s.Wait("a", 0, at(0), false)
	if res != JoinQueued {
		t.Fatalf("a: %v", res)
	}
	b, _, _ := s.Wait("b", 0, at(1), false)
	if _, _, res := s.Wait("a", 0, at(2), false); res != JoinSame {
		t.Fatalf("a second delivery of a waiting lane: %v, want JoinSame", res)
	}
	// a is handed back, b keeps waiting; a's redelivery takes its old place.
	if deps, ok := s.Leave(a, at(3)); !ok || deps != 1 || !s.Known("a", at(3)) {
		t.Fatal("a handed back must keep its place")
	}
	a2, _, _ := s.Wait("a", 0, at(4), false)
	s.Requeue("y", at(5)) // a lane that yielded: the end of the line
	y, _, _ := s.Wait("y", 0, at(6), false)
	c, _, _ := s.Wait("c", 0, at(5), false) // began to wait before y's delivery came back
	if _, _, res := s.Wait("d", 0, at(7), false); res != JoinFull {
		t.Fatalf("a fifth waiter: %v, want JoinFull", res)
	}
	var got []*Waiter
	for range 4 {
		s.Put("", 0, time.Time{})
		for _, w := range []*Waiter{a2, b, y, c} {
			select {
			case <-w.Granted():
				if !slices.Contains(got, w) {
					got = append(got, w)
				}
			default:
			}
		}
	}
	if want := []*Waiter{a2, b, y, c}; !slices.Equal(got, want) {
		names := func(ws []*Waiter) (out []string) {
			for _, w := range ws {
				out = append(out, w.token)
			}
			return out
		}
		t.Fatalf("slots went to %v, want %v", names(got), names(want))
	}
	if _, ok := s.Leave(a2, at(8)); ok {
		t.Fatal("leave after the grant must report the slot was handed over")
	}
	s.Put("", 0, time.Time{})
	if s.Used() != 0 || s.waiting.Load() != 0 {
		t.Fatalf("used %d, waiting %d after every slot came back", s.Used(), s.waiting.Load())
	}
}

// TestSlotsByteBudget: a lane takes a slot only when its payload fits the
// byte budget as well; one that does not waits in line (later lanes wait
// behind it, even small ones: first come, first served) and gets its slot
// once enough bytes come back; the line itself holds at most the budget's
// worth of payloads; a payload larger than the whole budget is charged the
// budget and runs alone; without a budget bytes never block.
func TestSlotsByteBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	granted := func(w *Waiter) bool {
		select {
		case <-w.Granted():
			return true
		default:
			return false
		}
	}
	s := New(8, 100, Shares{})
	a, ok := s.Take("", 60, time.Time{})
	if !ok || a != 60 {
		t.Fatalf("take(60) = %d %v, want a slot holding 60", a, ok)
	}
	if _, ok := s.Take("", 50, time.Time{}); ok {
		t.Fatal("60 + 50 bytes went over a budget of 100")
	}
	big, _, res := s.Wait("big", 50, at(0), false)
	if res != JoinQueued {
		t.Fatalf("a payload over the budget: %v, want JoinQueued", res)
	}
	small, _, _ := s.Wait("small", 10, at(1), false) // fits, but comes later
	if _, ok := s.Take("", 1, time.Time{}); ok || granted(small) {
		t.Fatal("a lane jumped the line while one waits for bytes")
	}
	// The line holds 60 bytes of payloads: 50 more would pass the budget.
	if _, _, res := s.Wait("more", 50, at(2), false); res != JoinFull {
		t.Fatalf("a waiter past the budget's worth of waiting payloads: %v, want JoinFull", res)
	}
	s.Put("", a, time.Time{})
	if !granted(big) || !granted(small) || s.UsedBytes() != 60 || s.Used() != 2 {
		t.Fatalf("after 60 bytes came back: big %v small %v, %d bytes in %d slots, want both granted, 60 in 2",
			granted(big), granted(small), s.UsedBytes(), s.Used())
	}
	s.Put("", big.bytes, time.Time{})
	s.Put("", small.bytes, time.Time{})
	if huge := s.Charge(1 << 30); huge != 100 {
		t.Fatalf("a payload over the whole budget is charged %d, want the budget (100)", huge)
	}
	h, ok := s.Take("", 1<<30, time.Time{})
	if !ok || s.UsedBytes() != 100 {
		t.Fatalf("a payload over the budget on an idle worker: %v, %d bytes held", ok, s.UsedBytes())
	}
	if _, ok := s.Take("", 0, time.Time{}); !ok {
		t.Fatal("a lane holding no payload is refused while slots are free")
	}
	s.Put("", 0, time.Time{})
	s.Put("", h, time.Time{})
	if s.Used() != 0 || s.UsedBytes() != 0 || s.waiting.Load() != 0 || s.waitB != 0 {
		t.Fatalf("used %d, %d bytes, waiting %d (%d bytes) after every slot came back", s.Used(), s.UsedBytes(), s.waiting.Load(), s.waitB)
	}
	none := New(2, -1, Shares{})
	if b, ok := none.Take("", 1<<30, time.Time{}); !ok || b != 0 {
		t.Fatalf("without a budget: take = %d %v, want a slot holding 0", b, ok)
	}
}

// shares names a lane's tenant by its token's prefix up to ':'.
func shares(weights map[string]int) Shares {
	return Shares{
		Tenant: func(token string) string { t, _, _ := strings.Cut(token, ":"); return t },
		Weight: func(tenant string) int { return weights[tenant] },
	}
}

// A noisy tenant's lanes that waited first do not take every slot that
// frees: the quiet tenant's lane, with no slot in use, gets the next one;
// and the noisy tenant filling the line does not keep the quiet one out
// of it. (Before, the line was first come, first served: the quiet lane
// waited behind every noisy one, or was handed back.)
func TestSharesQuietTenant(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := New(2, -1, shares(nil)) // two slots, eight may wait
	for i := range 2 {
		if _, ok := s.Take(fmt.Sprintf("noisy:%d", i), 0, now); !ok {
			t.Fatal("no free slot")
		}
	}
	var noisy []*Waiter
	for i := 2; i < 10; i++ {
		w, _, res := s.Wait(fmt.Sprintf("noisy:%d", i), 0, now.Add(time.Duration(i)*time.Millisecond), false)
		if res != JoinQueued {
			t.Fatalf("noisy lane %d: %v", i, res)
		}
		noisy = append(noisy, w)
	}
	if _, _, res := s.Wait("noisy:10", 0, now.Add(time.Second), false); res != JoinFull {
		t.Fatalf("the noisy tenant past the line's bound: %v; want JoinFull", res)
	}
	quiet, _, res := s.Wait("quiet:1", 0, now.Add(time.Second), false)
	if res != JoinQueued {
		t.Fatalf("the quiet tenant at a line the noisy one filled: %v; want it in line", res)
	}
	s.Put("noisy:0", 0, now)
	select {
	case <-quiet.Granted():
	default:
		t.Fatal("the freed slot went to a noisy lane; want the quiet tenant's, which has none")
	}
	s.Put("noisy:1", 0, now)
	select {
	case <-noisy[0].Granted():
	default:
		t.Fatal("the next slot did not go to the noisy lane that waited longest")
	}
	// The quiet lane's turn ends: the noisy tenant is over its share
	// (two slots of two), the quiet one, seen a moment ago, under it, so
	// the slot is kept free for it, and its next message takes it at once
	// though noisy lanes wait.
	s.Put("quiet:1", 0, now)
	select {
	case <-noisy[1].Granted():
		t.Fatal("the slot went to the noisy tenant over its share")
	default:
	}
	if _, ok := s.Take("quiet:2", 0, now.Add(time.Second)); !ok {
		t.Fatal("the quiet tenant's next message waits behind the noisy lanes")
	}
	if _, ok := s.Take("noisy:99", 0, now.Add(time.Second)); ok {
		t.Fatal("a noisy delivery took a slot ahead of the noisy lanes in line")
	}
}

// Weights divide the slots: with tenant a at weight 3 and b at 1 both
// waiting, the slots that free go 3 to 1.
func TestSharesWeights(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := New(8, -1, shares(map[string]int{"a": 3}))
	for i := range 8 {
		if _, ok := s.Take(fmt.Sprintf("x:%d", i), 0, now); !ok {
			t.Fatal("no free slot")
		}
	}
	var ws []*Waiter
	for i := range 8 {
		for _, tn := range []string{"b", "a"} {
			w, _, res := s.Wait(fmt.Sprintf("%s:%d", tn, i), 0, now.Add(time.Duration(i)*time.Millisecond), false)
			if res != JoinQueued {
				t.Fatalf("%s:%d: %v", tn, i, res)
			}
			ws = append(ws, w)
		}
	}
	later := now.Add(shareKept + time.Second) // x, gone, no longer counts in the shares
	for i := range 8 {
		s.Put(fmt.Sprintf("x:%d", i), 0, later)
	}
	got := map[string]int{}
	for _, w := range ws {
		select {
		case <-w.Granted():
			got[w.tenant]++
		default:
		}
	}
	if got["a"] != 6 || got["b"] != 2 {
		t.Fatalf("slots by tenant %v; want a 6, b 2", got)
	}
}

// quietAndNoisy fills an 8-slot scheduler with 3 quiet and 5 noisy turns
// at now and queues n more noisy lanes behind them.
func quietAndNoisy(t *testing.T, now time.Time, n int) (*Scheduler, []*Waiter) {
	t.Helper()
	s := New(8, -1, shares(nil))
	for i := range 3 {
		if _, ok := s.Take(fmt.Sprintf("quiet:%d", i), 0, now); !ok {
			t.Fatal("no free slot")
		}
	}
	for i := range 5 {
		if _, ok := s.Take(fmt.Sprintf("noisy:%d", i), 0, now); !ok {
			t.Fatal("no free slot")
		}
	}
	var noisy []*Waiter
	for i := 5; i < 5+n; i++ {
		w, _, res := s.Wait(fmt.Sprintf("noisy:%d", i), 0, now, false)
		if res != JoinQueued {
			t.Fatalf("noisy lane %d: %v", i, res)
		}
		noisy = append(noisy, w)
	}
	return s, noisy
}

// countGranted counts the waiters in ws already granted a slot.
func countGranted(ws []*Waiter) int {
	n := 0
	for _, w := range ws {
		select {
		case <-w.Granted():
			n++
		default:
		}
	}
	return n
}

// A quiet tenant under its share keeps as many slots as it used at once
// lately: when its turns end, their slots stay free for its next messages
// though the noisy tenant's lanes wait, and its next messages take them at
// once; once its use is older than shareKept, the slots go to the noisy
// lanes again. (Before, one slot in sixteen, at least one, stayed free:
// three quiet sessions sending together found one.)
func TestSharesKeepRecentDemand(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s, noisy := quietAndNoisy(t, now, 15)
	granted := func() int { return countGranted(noisy) }
	// The quiet turns end; then a noisy one: its slot goes to a noisy lane
	// in line, the quiet ones' stay free.
	for i := range 3 {
		s.Put(fmt.Sprintf("quiet:%d", i), 0, now.Add(time.Second))
	}
	s.Put("noisy:0", 0, now.Add(time.Second))
	if g := granted(); g != 1 {
		t.Fatalf("%d noisy lanes got a slot; want 1 (the noisy one's), the quiet tenant's 3 kept", g)
	}
	for i := range 3 {
		if _, ok := s.Take(fmt.Sprintf("quiet:%d", i+10), 0, now.Add(1100*time.Millisecond)); !ok {
			t.Fatalf("the quiet tenant's message %d found no slot kept", i)
		}
	}
	// Its use grows stale: its slots, once free, go to the noisy lanes.
	later := now.Add(2*time.Second + shareKept + time.Second)
	for i := range 3 {
		s.Put(fmt.Sprintf("quiet:%d", i+10), 0, now.Add(2*time.Second))
	}
	s.Put("noisy:1", 0, later)
	if g := granted(); g != 5 {
		t.Fatalf("%d noisy lanes got a slot after the quiet tenant's use went stale; want 5", g)
	}
}

// Once a quiet tenant's use is stale, the slots kept for it go to the line
// at the next delivery that joins it, not at the next Put: with the noisy
// tenant's turns long, nothing else frees a slot. (Before, they idled
// until one of those turns ended.)
func TestKeptSlotsGoWhenStaleWithoutPut(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s, noisy := quietAndNoisy(t, now, 5)
	for i := range 3 {
		s.Put(fmt.Sprintf("quiet:%d", i), 0, now.Add(time.Second))
	}
	granted := func() int { return countGranted(noisy) }
	if g := granted(); g != 0 {
		t.Fatalf("%d noisy lanes got a slot kept for the quiet tenant", g)
	}
	later := now.Add(time.Second + shareKept + time.Second)
	w, _, res := s.Wait("noisy:10", 0, later, false)
	if res != JoinQueued {
		t.Fatalf("noisy lane 10: %v", res)
	}
	noisy = append(noisy, w)
	if g := granted(); g != 3 {
		t.Fatalf("%d noisy lanes got a slot once the quiet tenant's use was stale; want 3", g)
	}
	if s.Waiting() != 3 {
		t.Fatalf("%d lanes in line, want 3", s.Waiting())
	}
}
