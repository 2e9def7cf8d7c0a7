// Package backoff is the one home of the fleet's retry waits: a Policy says
// how long retry n waits (doubling or growing linearly from Base, capped at
// Max, optionally with full jitter), Wait waits it unless the context ends
// first, and Sleep is that wait for a delay computed elsewhere.
//
// Every retry loop takes its schedule from it: the client's calls (call.go),
// the auth bucket's compare-and-swap (authstore), the lease writes'
// conflicts (kvstore), the runner's same-key retries, the OTLP exporter,
// the member's start (internal/fleet), and in lanes/ the fenced writes'
// conflicts, the finals promise, a failed turn's retry and the uncounted
// attempts' notes (which wait on a Policy's Delay alongside the worker's
// shutdown). What to retry and how often stays with each caller.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a schedule of waits between retries.
type Policy struct {
	// Base is the wait before retry 1.
	Base time.Duration
	// Max caps every wait; 0 = no cap.
	Max time.Duration
	// Linear grows the wait by Base each retry (Base, 2·Base, 3·Base, …)
	// instead of doubling it (Base, 2·Base, 4·Base, …).
	Linear bool
	// Jitter waits a random time in (0, delay] instead of the delay
	// itself (full jitter: writers that collided do not collide again).
	Jitter bool
}

// Delay is the wait before retry n (1-based; n < 1 counts as 1). With
// Jitter it is a random time in (0, the delay].
func (p Policy) Delay(n int) time.Duration {
	n = max(n, 1)
	var d time.Duration
	if p.Linear {
		d = time.Duration(n) * p.Base
		if d/time.Duration(n) != p.Base { // overflow
			d = 1<<63 - 1
		}
	} else {
		d = p.Base << min(n-1, 30)
		if d>>min(n-1, 30) != p.Base { // overflow
			d = 1<<63 - 1
		}
	}
	if p.Max > 0 {
		d = min(d, p.Max)
	}
	if p.Jitter && d > 0 {
		d = rand.N(d) + 1
	}
	return d
}

// Wait waits Delay(n), or until ctx is done: then it returns
// context.Cause(ctx).
func (p Policy) Wait(ctx context.Context, n int) error {
	return Sleep(ctx, p.Delay(n))
}

// Sleep waits d, or until ctx is done: then it returns context.Cause(ctx).
// A d of zero or less returns at once (nil, or the cause when ctx is done).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Counter counts the retries of one loop under a Policy: Next is the wait
// before the next retry, Reset starts over after a success.
type Counter struct {
	Policy Policy
	n      int
}

// Next counts a retry and returns its wait.
func (c *Counter) Next() time.Duration {
	c.n++
	return c.Policy.Delay(c.n)
}

// Reset starts the schedule over.
func (c *Counter) Reset() { c.n = 0 }

// Retrying reports whether a retry was counted since the last Reset.
func (c *Counter) Retrying() bool { return c.n > 0 }

// Wait counts a retry and waits for it, or until ctx is done: then it
// returns context.Cause(ctx).
func (c *Counter) Wait(ctx context.Context) error { return Sleep(ctx, c.Next()) }
