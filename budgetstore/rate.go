package budgetstore

import (
	"context"
	"fmt"
	"time"

	"github.com/lanefleet/lanefleet/governance"
)

// Provider rate limits are budgets too (governance.Limits.Rate), one key
// per rule in the budgets bucket (rate.<pattern as a lane token>), and are
// admitted through the same leases: Reserve waits for a rate limit's
// window to move on instead of pausing.

// SetRate makes the bucket hold rule's limits (unchanged limits write
// nothing) and waits until this store's cache has them, so the next
// Reserve counts the rule. A worker calls it at start for each of its
// --rate-limit rules: the last worker to start with a rule sets its limits
// for the whole fleet. It is configuration, not an operator's change: it
// is not audited (a worker may not write the audit stream), the worker
// logs it. What the window used is kept.
func (s *Store) SetRate(ctx context.Context, rule governance.RateRule) error {
	sc, want := rule.Scope(), rule.Limit.Limits()
	if st, found, err := s.Cached(sc); err == nil && found && st.Limits == want {
		return nil
	}
	key, err := Key(sc)
	if err != nil {
		return err
	}
	_, _, err = s.b.update(ctx, key, governance.State{}, 0, true, func(st *governance.State, now time.Time) error {
		if st.Limits == want {
			return errNoChange
		}
		if st.Limits.Window != want.Window {
			st.Used, st.Slots, st.Start = governance.Amount{}, nil, 0
		}
		st.Limits, st.Refused = want, nil
		st.Roll(now)
		return nil
	})
	if err != nil {
		return fmt.Errorf("budgetstore: rate limit %s: %w", rule, err)
	}
	for {
		s.mu.RLock()
		c, changed := s.states[sc], s.changed
		s.mu.RUnlock()
		if c.bad == nil && c.st.Limits == want {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("budgetstore: rate limit %s: %w", rule, context.Cause(ctx))
		}
	}
}

// Lower lowers a rate limit's room until until to requests and tokens
// more (negative: unknown), as a provider's rate-limit headers say
// (governance.State.Cap). A provider's count that is not tighter than the
// fleet's, as the cache has it, writes nothing.
func (s *Store) Lower(ctx context.Context, sc governance.Scope, requests, tokens int64, until time.Time) error {
	st, found, err := s.Cached(sc)
	if err != nil || !found || !st.Limits.Rate {
		return err
	}
	if !st.Cap(requests, tokens, until.UnixMilli(), s.b.cfg.Now()) {
		return nil
	}
	return s.apply(ctx, sc, func(st *governance.State, now time.Time) error {
		if !st.Cap(requests, tokens, until.UnixMilli(), now) {
			return errNoChange
		}
		return nil
	})
}
