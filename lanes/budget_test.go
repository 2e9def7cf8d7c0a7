package lanes

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOverBudgetLaneWaitsInLine: an owner admitted for a small trigger
// lets its lane go because the lane's next message does not fit the byte
// budget. The trigger's redelivery is charged what the lane needs, so it
// waits in line for the bytes like any delivery of that size, instead of
// taking a slot and the lease every busyNakDelay only to let go again. A
// small lane that comes after it waits behind it (first come, first
// served), and once the bytes are back both run once.
func TestOverBudgetLaneWaitsInLine(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 30*time.Second, 5*time.Second)
	big := strings.Repeat("x", 64<<10)
	var (
		mu      sync.Mutex
		order   []string
		ran     = map[string]int{}
		started = make(chan struct{})
		release = make(chan struct{})
		// bigStored holds the small turn until the large follow-up is
		// stored, so its owner finds it next.
		bigStored = make(chan struct{})
	)
	h := &echoHandler{hook: func(t *Turn) error {
		if t.SessionKey == "follow" && t.Inbound.Text == "small" {
			<-bigStored
		}
		text := t.SessionKey + ":" + t.Inbound.Text[:min(5, len(t.Inbound.Text))]
		mu.Lock()
		order = append(order, text)
		ran[text]++
		mu.Unlock()
		if t.SessionKey == "holder" {
			close(started)
			<-release
		}
		return nil
	}}
	// Room for one large payload, not two; slots to spare.
	w, _, _ := f.fairWorker(t, h, Config{Concurrency: 8, MaxInflightBytes: 3 * (64 << 10) / 2})
	var releaseOnce, storedOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	stored := func() { storedOnce.Do(func() { close(bigStored) }) }
	t.Cleanup(stored) // a failed publish must not leave the small turn held
	f.publish(t, "holder", big)
	waitClosed(t, "the holder's turn", started)
	small := f.publish(t, "follow", "small")
	last := f.publish(t, "follow", big)
	stored()
	f.waitFinal(t, "follow", small)
	waitFor(t, "the follow-up let go over the budget", func() bool { return w.Stats().OverBudget.Load() >= 1 })
	// The trigger comes back after busyNakDelay: it either waits in line
	// (fixed) or takes the lane and lets it go again (the bounce).
	waitFor(t, "the redelivered trigger waits, or bounces", func() bool {
		return w.Waiting() >= 1 || w.Stats().OverBudget.Load() >= 2
	})
	if n := w.Stats().OverBudget.Load(); n != 1 {
		t.Fatalf("the lane was let go over the budget %d times while the budget stayed full, want 1 (its trigger bounced)", n)
	}
	acquired := w.Stats().Acquired.Load()
	other := f.publish(t, "other", "tiny")
	waitFor(t, "the small lane waiting behind the large one", func() bool { return w.Waiting() >= 2 })
	if a := w.Active(); a != 1 {
		t.Fatalf("%d lanes running, want only the holder's", a)
	}
	if n := w.Stats().Acquired.Load(); n != acquired {
		t.Fatalf("%d leases taken while the budget was full, want none", n-acquired)
	}
	free()
	f.waitFinal(t, "follow", last)
	f.waitFinal(t, "other", other)
	waitFor(t, "every slot and byte back", func() bool { return w.Active() == 0 && w.sched.usedBytes() == 0 })
	if n := w.Stats().OverBudget.Load(); n != 1 {
		t.Fatalf("let go over the budget %d times, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	// The bytes coming back are handed to both waiters at once, the large
	// one first; their turns may then end in either order.
	want := []string{"holder:xxxxx", "follow:small", "follow:xxxxx", "other:tiny"}
	if got := slices.Clone(order); len(got) != len(want) || !slices.Equal(got[:2], want[:2]) || !slices.Equal(slices.Sorted(slices.Values(got[2:])), want[2:]) {
		t.Fatalf("turns ran %q, want %q (the last two in either order)", order, want)
	}
	for k, n := range ran {
		if n != 1 {
			t.Errorf("%s ran %d times", k, n)
		}
	}
}

// TestSlotsOverBudgetNeed: a lane an owner let go over the byte budget is
// charged what its next message needs, whether its delivery takes a free
// slot or waits in line, until a slot is handed to it; a lane that went
// elsewhere is forgotten with its place.
func TestSlotsOverBudgetNeed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	s := newSlots(4, 100)
	hog, ok := s.take("hog", 60, at(0))
	if !ok || hog != 60 {
		t.Fatalf("hog: took %d, %v", hog, ok)
	}
	s.overBudget("big", 50, at(0))
	if _, ok := s.take("big", 1, at(0)); ok {
		t.Fatal("a lane needing 50 bytes took a slot with 40 free")
	}
	w, b, res := s.wait("big", 1, at(1), false)
	if res != joinQueued || b != 50 || w.bytes != 50 {
		t.Fatalf("big waits: %v charged %d, want joinQueued charged 50", res, b)
	}
	if _, ok := s.take("small", 1, at(1)); ok {
		t.Fatal("a small lane passed the large one waiting for bytes")
	}
	s.put(hog)
	select {
	case <-w.grant:
	default:
		t.Fatal("the bytes came back and the large lane did not get them")
	}
	if got := s.usedBytes(); got != 50 {
		t.Fatalf("%d bytes in use, want the large lane's 50", got)
	}
	s.put(50)
	// Granted: the lane needs no more than its payload again.
	if b, ok := s.take("big", 1, at(2)); !ok || b != 1 {
		t.Fatalf("big after its turn: took %d, %v; want 1", b, ok)
	}
	s.put(1)

	// A free slot with room: the delivery takes it, charged the need, and
	// the need is spent.
	s.overBudget("mid", 30, at(2))
	if b, ok := s.take("mid", 1, at(2)); !ok || b != 30 {
		t.Fatalf("mid: took %d, %v; want 30", b, ok)
	}
	s.put(30)
	if b, _ := s.take("mid", 1, at(2)); b != 1 {
		t.Fatalf("mid again: charged %d, want 1", b)
	}
	s.put(1)

	if s.known("mid", at(2)) {
		t.Fatal("a lane that took a slot kept its place")
	}

	// A lane whose trigger went to another worker is forgotten with its
	// place when the next lane is let go, and is not charged its need
	// even before that (no lane let go: no pruning).
	s.overBudget("gone", 90, at(3))
	later := at(3).Add(placeKept + 2*time.Second)
	if s.known("gone", later) {
		t.Fatal("the place of a lane that went elsewhere counts")
	}
	if b, _ := s.take("gone", 1, later); b != 1 {
		t.Fatalf("gone: charged %d, want 1", b)
	}
	s.put(1)
	s.overBudget("gone", 90, at(3))
	s.overBudget("next", 90, later)
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
	s := newSlots(4, 100)
	hog, _ := s.take("hog", 10, at(0))
	s.overBudget("big", 100, at(0))
	big, b, res := s.wait("big", 1, at(1), false)
	if res != joinQueued || b != 100 {
		t.Fatalf("big: %v charged %d", res, b)
	}
	other, _, res := s.wait("other", 5, at(2), false)
	if res != joinQueued {
		t.Fatalf("a small lane behind one needing the whole budget: %v, want joinQueued", res)
	}
	q, _, _ := s.wait("queued", 1, at(3), false)
	s.overBudget("queued", 60, at(4))
	if q.bytes != 60 {
		t.Fatalf("a waiting delivery of a lane let go over the budget is charged %d, want 60", q.bytes)
	}
	s.put(hog)
	for _, w := range []*waiter{big, other, q} {
		select {
		case <-w.grant:
		default:
			t.Fatalf("%s not granted after the budget came back", w.token)
		}
		s.put(w.bytes)
	}
	if s.usedBytes() != 0 || s.waitB != 0 {
		t.Fatalf("left charged: %d in use, %d waiting", s.usedBytes(), s.waitB)
	}
}
