package authprofile

import (
	"maps"
	"math"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

// Reference cooldown constants (runtime spec §1, §17.4).
const (
	// CooldownBase is the first step of the cooldown ladder.
	CooldownBase = time.Minute
	// CooldownMaxDefault caps the reference ladder (1m, 5m, 25m, 1h).
	CooldownMaxDefault = time.Hour
	// BillingBackoffDefault is the first billing / permanent-auth disable.
	BillingBackoffDefault = 5 * time.Hour
	// BillingMaxDefault caps the billing / permanent-auth disable.
	BillingMaxDefault = 24 * time.Hour
	// FailureWindowDefault is how long failures keep counting.
	FailureWindowDefault = 24 * time.Hour
	// minBillingBackoff is the floor of a configured billing base.
	minBillingBackoff = time.Minute
)

// Config is the auth slice of the configuration plus the fleet policy.
type Config struct {
	// Profiles are the configured profiles (auth.profiles), in config order.
	Profiles []ProfileConfig
	// Order is the configured explicit order per provider (auth.order).
	Order map[string][]string
	// Cooldowns tunes the billing backoff and the failure window.
	Cooldowns Cooldowns
	// Fleet switches on the fleet's improvements; the zero value keeps the
	// reference behaviour.
	Fleet Fleet
}

// ProfileConfig is one auth.profiles entry: which provider a profile id is
// for and which credential type ("mode") it must have.
type ProfileConfig struct {
	ID       string
	Provider string
	Mode     CredentialType
}

// Cooldowns is auth.cooldowns. Non-positive values mean the default.
type Cooldowns struct {
	BillingBackoffHours           float64
	BillingBackoffHoursByProvider map[string]float64 // keys are normalised on lookup
	BillingMaxHours               float64
	FailureWindowHours            float64
}

// Fleet is the fleet's policy on top of the reference behaviour. The zero
// value is the reference.
type Fleet struct {
	// PerModel keys cooldowns for model-scoped reasons (everything but
	// auth, auth_permanent and billing) by (profile, model), so one model's
	// rate limit does not block the profile's other models.
	PerModel bool
	// RetryAfterFloor makes a failure's Retry-After the minimum cooldown,
	// extending (never shortening) an active window.
	RetryAfterFloor bool
	// MaxCooldown caps the cooldown ladder; 0 = CooldownMaxDefault.
	MaxCooldown time.Duration
	// ProbeMargin lets a cooling (not disabled) profile be probed once its
	// window ends within this margin; 0 = no probing.
	ProbeMargin time.Duration
	// ProbeInterval is the least time between two probes of one profile
	// (or one (profile, model)); 0 = ProbeIntervalDefault.
	ProbeInterval time.Duration
	// KeepFailureInRun makes a success recorded by the run that recorded
	// the last failure only stamp lastUsed instead of clearing the failure.
	KeepFailureInRun bool
	// LastResort lets a run whose every profile is cooling, with no other
	// model left to try, still call the provider with the profile that
	// frees up first (see Config.LastResort) instead of refusing: the
	// cooldown ladder spreads load over keys, which a lone key cannot do,
	// while the server's own Retry-After is still honoured.
	LastResort bool
}

// ProbeIntervalDefault is the default Fleet.ProbeInterval.
const ProbeIntervalDefault = 30 * time.Second

// FleetDefaults returns the policy the fleet runs with: per-model
// cooldowns, Retry-After floor, a ladder capped at 5 minutes, probes 2
// minutes before expiry at most every 30 s, no clearing of a failure by
// the run that caused it, and the last-resort use of a cooling profile.
func FleetDefaults() Fleet {
	return Fleet{
		PerModel:         true,
		RetryAfterFloor:  true,
		MaxCooldown:      5 * time.Minute,
		ProbeMargin:      2 * time.Minute,
		ProbeInterval:    ProbeIntervalDefault,
		KeepFailureInRun: true,
		LastResort:       true,
	}
}

func (f Fleet) probeInterval() time.Duration {
	if f.ProbeInterval > 0 {
		return f.ProbeInterval
	}
	return ProbeIntervalDefault
}

// CooldownFor is the reference cooldown ladder: min(1h, 1min·5^min(n−1, 3))
// for the n-th failure in the window (n < 1 counts as 1).
func CooldownFor(errorCount int) time.Duration {
	n := max(1, errorCount)
	return min(CooldownMaxDefault, CooldownBase*time.Duration(math.Pow(5, float64(min(n-1, 3)))))
}

// Cooldown is the ladder under the fleet cap.
func (c Config) Cooldown(errorCount int) time.Duration {
	d := CooldownFor(errorCount)
	if c.Fleet.MaxCooldown > 0 {
		d = min(d, c.Fleet.MaxCooldown)
	}
	return d
}

func hours(h float64, def time.Duration) time.Duration {
	if h > 0 && !math.IsInf(h, 0) && !math.IsNaN(h) {
		return time.Duration(h * float64(time.Hour))
	}
	return def
}

// DisableFor is the billing / permanent-auth disable for the n-th failure
// of that reason: min(max, base·2^min(n−1, 10)), base at least one minute
// and max never below base.
func (c Config) DisableFor(prov string, n int) time.Duration {
	baseH := c.Cooldowns.BillingBackoffHours
	key := NormalizeProvider(prov)
	for k, v := range c.Cooldowns.BillingBackoffHoursByProvider {
		if NormalizeProvider(k) == key {
			baseH = v
			break
		}
	}
	base := max(minBillingBackoff, hours(baseH, BillingBackoffDefault))
	maxD := max(base, hours(c.Cooldowns.BillingMaxHours, BillingMaxDefault))
	raw := float64(base) * math.Pow(2, float64(min(max(1, n)-1, 10)))
	return time.Duration(min(float64(maxD), raw))
}

func (c Config) failureWindow() time.Duration {
	return hours(c.Cooldowns.FailureWindowHours, FailureWindowDefault)
}

// Disabling reports whether a failure of reason r disables the profile
// (billing, auth_permanent) rather than cooling it down.
func Disabling(r provider.Reason) bool {
	return r == provider.ReasonBilling || r == provider.ReasonAuthPermanent
}

// ModelScoped reports whether a failure of reason r concerns one model
// rather than the credential: everything but auth, auth_permanent and
// billing.
func ModelScoped(r provider.Reason) bool {
	return r != provider.ReasonAuth && !Disabling(r)
}

// EventKind is what happened to a profile.
type EventKind string

// Event kinds.
const (
	// EventFailure records a failure (markAuthProfileFailure).
	EventFailure EventKind = "failure"
	// EventUsed records a success (markAuthProfileUsed).
	EventUsed EventKind = "used"
	// EventClearCooldown is a manual reset (clearAuthProfileCooldown).
	EventClearCooldown EventKind = "clearCooldown"
	// EventProbe claims a probe of a cooling profile (Fleet.ProbeMargin).
	EventProbe EventKind = "probe"
)

// Event is one change to a profile's state.
type Event struct {
	Kind EventKind
	// Provider is the profile's provider (OpenRouter profiles ignore
	// failures; billing backoff may be per provider).
	Provider string
	// Reason is the failure reason (EventFailure).
	Reason provider.Reason
	// Model is the model the run used; with Fleet.PerModel a model-scoped
	// failure cools only (profile, Model).
	Model string
	// RetryAfter is the server-requested delay (Fleet.RetryAfterFloor).
	RetryAfter time.Duration
	// RunID identifies the run (Fleet.KeepFailureInRun).
	RunID string
}

// Apply returns the state after ev at time now. It never modifies s. Apply
// is deterministic, so a KV writer can re-apply the event to a fresh state
// after a failed compare-and-swap.
func (c Config) Apply(s State, ev Event, now time.Time) State {
	switch ev.Kind {
	case EventFailure:
		return c.fail(s, ev, now)
	case EventUsed:
		return c.used(s, ev, now)
	case EventClearCooldown:
		out := s.Clone()
		out.ErrorCount = 0
		out.CooldownUntil, out.DisabledUntil, out.DisabledReason = 0, 0, ""
		out.FailureCounts = nil
		out.Models = nil
		out.FailedRun = ""
		out.RetryUntil = 0
		return out
	case EventProbe:
		out := s.Clone()
		if c.Fleet.PerModel && ev.Model != "" && s.Models[ev.Model].CooldownUntil > ms(now) {
			m := out.Models[ev.Model]
			m.LastProbeAt = ms(now)
			out.Models[ev.Model] = m
		} else {
			out.LastProbeAt = ms(now)
		}
		return out
	}
	return s
}

func (c Config) used(s State, ev Event, now time.Time) State {
	out := s.Clone()
	out.LastUsed = ms(now)
	if c.Fleet.KeepFailureInRun && ev.RunID != "" && s.FailedRun == ev.RunID {
		return out
	}
	out.ErrorCount = 0
	out.CooldownUntil, out.DisabledUntil, out.DisabledReason = 0, 0, ""
	out.FailureCounts = nil
	out.FailedRun = ""
	out.LastProbeAt = 0
	out.RetryUntil = 0
	if ev.Model != "" && out.Models != nil {
		delete(out.Models, ev.Model)
		if len(out.Models) == 0 {
			out.Models = nil
		}
	}
	return out
}

// window computes a window end: an active window (end > now) is kept, else
// now+d; with the Retry-After floor, an active window is extended to
// now+retryAfter when that is later, and d is at least retryAfter.
func (c Config) window(cur int64, d time.Duration, retryAfter time.Duration, now time.Time) int64 {
	t := ms(now)
	floor := int64(0)
	if c.Fleet.RetryAfterFloor && retryAfter > 0 {
		floor = t + retryAfter.Milliseconds()
	}
	if cur > t {
		return max(cur, floor)
	}
	return max(t+d.Milliseconds(), floor)
}

func (c Config) fail(s State, ev Event, now time.Time) State {
	if isOpenRouter(ev.Provider) {
		return s
	}
	t := ms(now)
	win := c.failureWindow().Milliseconds()
	reason := ev.Reason
	if reason == "" {
		reason = provider.ReasonUnknown
	}
	out := s.Clone()
	if c.Fleet.KeepFailureInRun && ev.RunID != "" {
		out.FailedRun = ev.RunID
	}
	if c.Fleet.PerModel && ev.Model != "" && ModelScoped(reason) {
		m := out.Models[ev.Model]
		if m.LastFailureAt > 0 && t-m.LastFailureAt > win {
			m.ErrorCount, m.FailureCounts = 0, nil
		}
		m.ErrorCount++
		m.FailureCounts = bump(m.FailureCounts, reason)
		m.LastFailureAt = t
		m.CooldownUntil = c.window(m.CooldownUntil, c.Cooldown(m.ErrorCount), ev.RetryAfter, now)
		m.RetryUntil = c.retryUntil(m.RetryUntil, ev.RetryAfter, now)
		if out.Models == nil {
			out.Models = map[string]ModelState{}
		}
		out.Models[ev.Model] = m
		return out
	}
	if out.LastFailureAt > 0 && t-out.LastFailureAt > win {
		out.ErrorCount, out.FailureCounts = 0, nil
	}
	out.ErrorCount++
	out.FailureCounts = bump(out.FailureCounts, reason)
	out.LastFailureAt = t
	out.RetryUntil = c.retryUntil(out.RetryUntil, ev.RetryAfter, now)
	if Disabling(reason) {
		if out.DisabledUntil <= t {
			out.DisabledReason = reason
		}
		out.DisabledUntil = c.window(out.DisabledUntil, c.DisableFor(ev.Provider, out.FailureCounts[reason]), ev.RetryAfter, now)
		return out
	}
	out.CooldownUntil = c.window(out.CooldownUntil, c.Cooldown(out.ErrorCount), ev.RetryAfter, now)
	return out
}

// retryUntil keeps the latest server-requested retry time.
func (c Config) retryUntil(cur int64, retryAfter time.Duration, now time.Time) int64 {
	if !c.Fleet.RetryAfterFloor || retryAfter <= 0 {
		return cur
	}
	return max(cur, ms(now)+retryAfter.Milliseconds())
}

func bump(m map[provider.Reason]int, r provider.Reason) map[provider.Reason]int {
	m = maps.Clone(m)
	if m == nil {
		m = map[provider.Reason]int{}
	}
	m[r]++
	return m
}
