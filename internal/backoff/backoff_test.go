package backoff

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestDelay: the schedules the fleet's retry loops use, each as it was
// written at its call site before this package.
func TestDelay(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	cases := []struct {
		name string
		p    Policy
		want []time.Duration // retries 1, 2, …
	}{
		{"client call: 100ms doubling to 1s", Policy{Base: 100 * ms, Max: time.Second},
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}},
		{"lease conflict: 2ms more each time, at most 50ms", Policy{Base: 2 * ms, Max: 50 * ms, Linear: true},
			[]time.Duration{2 * ms, 4 * ms, 6 * ms, 8 * ms}},
		{"member start: 200ms more each time", Policy{Base: 200 * ms, Linear: true},
			[]time.Duration{200 * ms, 400 * ms, 600 * ms}},
		{"otlp: 100ms doubling to 5s", Policy{Base: 100 * ms, Max: 5 * time.Second},
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second}},
		{"runner: 2s doubling, no cap", Policy{Base: 2 * time.Second},
			[]time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for i, want := range c.want {
				if got := c.p.Delay(i + 1); got != want {
					t.Errorf("retry %d: %v, want %v", i+1, got, want)
				}
			}
		})
	}
	if got := (Policy{Base: 2 * time.Millisecond, Max: 50 * time.Millisecond, Linear: true}).Delay(100); got != 50*time.Millisecond {
		t.Errorf("linear cap: %v", got)
	}
	if got := (Policy{Base: time.Second}).Delay(0); got != time.Second {
		t.Errorf("retry 0 counts as 1: %v", got)
	}
	if got := (Policy{Base: time.Hour}).Delay(1000); got <= 0 {
		t.Errorf("a doubling past the largest duration overflowed to %v", got)
	}
	if got := (Policy{Base: time.Hour, Linear: true}).Delay(1 << 40); got <= 0 {
		t.Errorf("a linear growth past the largest duration overflowed to %v", got)
	}
}

// TestJitter: the auth bucket's compare-and-swap waits a random time in
// (0, min(100ms, 1ms·2^(n−1))].
func TestJitter(t *testing.T) {
	t.Parallel()
	p := Policy{Base: time.Millisecond, Max: 100 * time.Millisecond, Jitter: true}
	for n := 1; n <= 12; n++ {
		limit := min(100*time.Millisecond, time.Millisecond<<(n-1))
		for range 50 {
			if d := p.Delay(n); d <= 0 || d > limit {
				t.Fatalf("retry %d: %v outside (0, %v]", n, d, limit)
			}
		}
	}
}

// TestWait: a wait ends after its delay, or at once with the context's
// cause when the context ends first (the fake clock of synctest: no
// wall-clock waiting).
func TestWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := (Policy{Base: time.Second}).Wait(t.Context(), 3); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 4*time.Second {
			t.Errorf("waited %v, want 4s", waited)
		}
		why := errors.New("lease lost")
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(time.Second, func() { cancel(why) })
		start = time.Now()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, why) {
			t.Errorf("Sleep after cancel: %v, want the cause", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("a cancelled wait took %v, want 1s", waited)
		}
		if err := Sleep(ctx, 0); !errors.Is(err, why) {
			t.Errorf("Sleep(0) on a done context: %v", err)
		}
		if err := Sleep(t.Context(), 0); err != nil {
			t.Errorf("Sleep(0): %v", err)
		}
	})
}

// TestCounter: a loop's retries follow the policy, and start over after a
// reset.
func TestCounter(t *testing.T) {
	t.Parallel()
	c := Counter{Policy: Policy{Base: 20 * time.Millisecond, Max: time.Second}}
	if c.Retrying() {
		t.Fatal("retrying before a retry")
	}
	for _, want := range []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond} {
		if got := c.Next(); got != want {
			t.Fatalf("next %v, want %v", got, want)
		}
	}
	c.Reset()
	if c.Retrying() || c.Next() != 20*time.Millisecond {
		t.Fatal("reset did not start over")
	}
}
