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
	waitFor(t, "every slot and byte back", func() bool { return w.Active() == 0 && w.sched.UsedBytes() == 0 })
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
