package fleet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/budgetstore"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
	"github.com/lanefleet/lanefleet/runner"
)

// lowerTimeout bounds writing what a provider's rate-limit headers said
// (on the call's path, before its stream is read).
const lowerTimeout = 2 * time.Second

// setRates makes the budgets bucket hold the worker's rate rules'
// limits (Config.RateLimits) and keeps the rules to match calls against.
func (b *budgets) setRates(ctx context.Context, rules []governance.RateRule) error {
	for _, r := range rules {
		if err := b.store.SetRate(ctx, r); err != nil {
			return fmt.Errorf("fleet: --rate-limit %s: %w", r, err)
		}
		b.log.Info().Str("rate_limit", r.String()).Msg("provider rate limit shared with the fleet")
	}
	b.rates = rules
	return nil
}

// admitRate waits until the call fits every rate limit it falls under (a
// waiting lifecycle event on its run says so) and returns what settles it,
// nil when no rule matches. A store that does not answer is an
// *runner.AdmitUnavailable: the call waits for it, as for budgets, and is
// never made unlimited.
func (b *budgets) admitRate(ctx context.Context, call runner.AdmitCall) (*rateAdmitted, error) {
	if len(b.rates) == 0 {
		return nil, nil
	}
	m := call.Request.Model
	scopes, tpm := b.rateScopes(m.Provider, m.ID, call.AuthProfile)
	if len(scopes) == 0 {
		return nil, nil
	}
	need := governance.RateNeed(inputTokens(call.Request), maxOutput(call.Request))
	// A call larger than a minute's tokens waits for a whole minute's.
	need.Tokens = min(need.Tokens, tpm)
	if len(call.Alternates) > 0 {
		// Before waiting, another auth profile with room takes the call.
		h, err := b.store.TryReserve(ctx, scopes, need)
		r, ok := errors.AsType[*budgetstore.ReachedError](err)
		if !ok || r.Exceeded == nil || !r.Exceeded.Waits() {
			return b.rateAdmitted(ctx, h, err, scopes)
		}
		if mv := b.moveRate(ctx, call, need, scopes, r); mv != nil {
			return nil, mv
		}
	}
	tenant := b.rule.Tenant(call.SessionKey)
	var waited time.Time
	h, err := b.store.Reserve(ctx, scopes, need, func(w budgetstore.Wait) {
		if waited.IsZero() {
			waited = time.Now()
		}
		if call.Waiting != nil {
			call.Waiting(rateWaitText(w), w.For)
		}
	})
	if !waited.IsZero() {
		b.metrics.RateWait(tenant, m.Provider, time.Since(waited))
	}
	return b.rateAdmitted(ctx, h, err, scopes)
}

// rateAdmitted is what settles a call admitted by the rate limits of
// scopes (h), or Admit's error for err.
func (b *budgets) rateAdmitted(ctx context.Context, h *budgetstore.Hold, err error, scopes []governance.Scope) (*rateAdmitted, error) {
	if r, ok := errors.AsType[*budgetstore.ReachedError](err); ok {
		return nil, &runner.AdmitRefusal{Kind: events.KindBudgetReached, Text: fmt.Sprintf("Rate limit: %s: %v.", r.Scope, r.Exceeded)}
	}
	if err != nil && ctx.Err() == nil && (kvstore.Transient(err) || errors.Is(err, budgetstore.ErrConflict)) {
		return nil, &runner.AdmitUnavailable{Err: err}
	}
	if err != nil {
		return nil, err
	}
	return &rateAdmitted{b: b, h: h, scopes: scopes}, nil
}

// rateScopes are the rate limits a call of model on provider made with
// profile falls under, and the least tokens a minute among them
// (math.MaxInt64 for none).
func (b *budgets) rateScopes(prov, model, profile string) ([]governance.Scope, int64) {
	var scopes []governance.Scope
	tpm := int64(math.MaxInt64)
	for _, r := range b.rates {
		if r.Matches(prov, model, profile) {
			scopes = append(scopes, r.Scope())
			if r.Limit.TPM > 0 {
				tpm = min(tpm, r.Limit.TPM)
			}
		}
	}
	return scopes, tpm
}

// moveRate finds, for a call that would wait (r) for the rate limits of
// its auth profile (scopes), the first of its alternates whose own rate
// limits have room for need now, and moves the call to it; nil when none
// has (the call waits).
func (b *budgets) moveRate(ctx context.Context, call runner.AdmitCall, need governance.Amount, scopes []governance.Scope, r *budgetstore.ReachedError) *runner.AdmitMove {
	m := call.Request.Model
	for _, alt := range call.Alternates {
		alts, tpm := b.rateScopes(m.Provider, m.ID, alt)
		if slices.Equal(alts, scopes) {
			continue // the same limits: no room there either
		}
		n := need
		n.Tokens = min(n.Tokens, tpm)
		h, err := b.store.TryReserve(ctx, alts, n)
		if err != nil {
			continue
		}
		// The next attempt admits the call with alt itself: this worker's
		// lease keeps the room meanwhile.
		(&rateAdmitted{b: b, h: h}).release()
		text := fmt.Sprintf("Rate limit: auth profile %s would wait for room in %s; the call moves to auth profile %s, which has room.",
			call.AuthProfile, strings.TrimPrefix(r.Scope.String(), "rate limit "), alt)
		b.log.Info().Str("from", call.AuthProfile).Str("to", alt).Str("rate_limit", r.Scope.Name).Msg("rate limit: a call moves to another auth profile instead of waiting")
		return &runner.AdmitMove{Profile: alt, Reason: provider.ReasonRateLimit, Text: text}
	}
	return nil
}

// rateWaitText is what the run of a call that waits for w reads.
func rateWaitText(w budgetstore.Wait) string {
	dim := "requests"
	if w.Exceeded.Dimension == "tokens" {
		dim = "tokens"
	}
	lim := governance.RateLimit{RPM: w.Limits.Max.Turns, TPM: w.Limits.Max.Tokens}
	s := fmt.Sprintf("Rate limit: the fleet shares %s (%s), and this model call would pass its %s a minute (%d used, %d held by calls in flight, this call may take %d); ",
		strings.TrimPrefix(w.Scope.String(), "rate limit "), lim, dim, w.Exceeded.Used, w.Exceeded.Reserved, w.Exceeded.Need)
	if w.For > 0 {
		return s + fmt.Sprintf("it waits about %s for room instead of being sent to collect a 429.", waitSeconds(w.For))
	}
	return s + "it waits for calls in flight to end instead of being sent to collect a 429."
}

// waitSeconds is d in whole seconds, rounded up ("12 s").
func waitSeconds(d time.Duration) string {
	return fmt.Sprintf("%d s", int64(math.Ceil(d.Seconds())))
}

// rateAdmitted settles a call admitted by rate limits, and its budgets'
// admission (budget, nil when it had none).
type rateAdmitted struct {
	b      *budgets
	h      *budgetstore.Hold
	scopes []governance.Scope
	budget runner.Admitted
}

// Settle counts the call's request and the tokens its provider reports.
func (a *rateAdmitted) Settle(u message.Usage) string {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if _, err := a.h.Settle(ctx, governance.RateReal(u.Input+u.Output+u.CacheRead+u.CacheWrite)); err != nil {
		a.b.log.Warn().Err(err).Msg("rate limit: a call's use was not recorded (its lease is charged whole when it expires)")
	}
	if a.budget == nil {
		return ""
	}
	return a.budget.Settle(u)
}

// release ends a call that was not made.
func (a *rateAdmitted) release() {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if _, err := a.h.Settle(ctx, governance.Amount{}); err != nil {
		a.b.log.Warn().Err(err).Msg("rate limit: release a call that was not made")
	}
}

// Response lowers the fleet's view of the call's rate limits to what the
// provider's headers say is left, when that is tighter
// (runner.ResponseObserver).
func (a *rateAdmitted) Response(status int, header func(string) string) {
	now := time.Now()
	room, ok := failover.RateHeaders(status, header, now)
	if !ok {
		return
	}
	reset := room.Reset
	if reset <= 0 {
		reset = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), lowerTimeout)
	defer cancel()
	for _, sc := range a.scopes {
		if err := a.b.store.Lower(ctx, sc, room.Requests, room.Tokens, now.Add(reset)); err != nil {
			a.b.log.Debug().Err(err).Str("rate_limit", sc.Name).Msg("rate limit: record the provider's rate-limit headers")
		}
	}
}
