package fallback

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

// Probe timing (runtime spec §1, §18).
const (
	// ProbeInterval is the least time between two probes of one provider.
	ProbeInterval = 30 * time.Second
	// ProbeMargin: a cooling primary is probed once its provider's soonest
	// cooldown ends within this margin.
	ProbeMargin = 2 * time.Minute
)

// Availability is what the fallback loop needs to know about a provider's
// auth profiles for one model (authprofile.Status gives it).
type Availability struct {
	// Profiles is how many usable profiles the provider has; 0 means it
	// runs on an environment or config key and is never skipped.
	Profiles int
	// AllCooling reports that every profile is cooling or disabled.
	AllCooling bool
	// Reason is the inferred unavailable reason; "" counts as rate_limit.
	Reason provider.Reason
	// SoonestExpiry is when the first window ends; zero = unknown.
	SoonestExpiry time.Time
}

// AvailabilityFunc reports a provider's availability for a model.
type AvailabilityFunc func(provider, model string) Availability

// ProbeThrottle remembers when each provider was last probed while all its
// profiles were cooling. ProbeLog is an in-memory implementation; a fleet
// may share one through its KV store.
type ProbeThrottle interface {
	LastProbe(provider string) time.Time
	MarkProbe(provider string, at time.Time)
}

// ProbeLog is an in-memory ProbeThrottle. It is not safe for concurrent use.
type ProbeLog map[string]time.Time

// LastProbe returns when provider was last probed (zero = never).
func (l ProbeLog) LastProbe(provider string) time.Time { return l[provider] }

// MarkProbe records a probe of provider at time at.
func (l ProbeLog) MarkProbe(provider string, at time.Time) { l[provider] = at }

// Classification is how the fallback loop sees an error.
type Classification struct {
	// Reason is the failover reason; "" when the error is not a failover
	// error (it cannot be coerced to one).
	Reason provider.Reason
	// Status is the HTTP status to report: the error's own, else the
	// reason's; 0 = none.
	Status int
	// Message describes the error; "" = err.Error().
	Message string
	// Abort reports a user abort (not a timeout): the loop stops at once.
	Abort bool
	// ContextOverflow reports a likely context overflow: never handled by
	// fallback, the loop stops at once.
	ContextOverflow bool
}

// Classifier classifies the errors a candidate's run returns.
type Classifier interface {
	Classify(err error) Classification
}

// ClassifierFunc adapts a function to Classifier.
type ClassifierFunc func(err error) Classification

// Classify calls f.
func (f ClassifierFunc) Classify(err error) Classification { return f(err) }

// Request describes one fallback run.
type Request struct {
	// Config is the model configuration; nil = none (only the requested
	// model is tried).
	Config *Config
	// Provider and Model are the requested model (blank = the primary).
	Provider, Model string
	// Override replaces the configured fallbacks when non-nil, even empty.
	Override []string
	// Classifier classifies candidate errors. Required.
	Classifier Classifier
	// Availability reports cooling providers; nil = no cooldown checks.
	Availability AvailabilityFunc
	// Probes throttles probes of cooling primaries; nil = a fresh ProbeLog.
	Probes ProbeThrottle
	// LastResort tries the last candidate although its provider is cooling
	// for a transient reason (not auth, auth_permanent or billing), rather
	// than ending the run without calling any provider; the run then uses
	// the provider's profile that frees up first
	// (authprofile.Fleet.LastResort). The reference skips it.
	LastResort bool
}

// ErrNoClassifier is returned by Run for a Request without a Classifier.
var ErrNoClassifier = errors.New("fallback: request has no classifier")

// Attempt records one candidate that did not produce the result.
type Attempt struct {
	Candidate Candidate
	Reason    provider.Reason // "unknown" when the error had none
	Status    int             // 0 = none
	Error     string
	// Skipped reports that the candidate was not called because its
	// provider was cooling.
	Skipped bool
}

// Step is the candidate to run next.
type Step struct {
	Candidate Candidate
	Index     int  // position in Candidates(req.Config, …)
	Primary   bool // the first candidate
	// DuringCooldown reports that every profile of the provider is cooling
	// and the candidate is tried anyway.
	DuringCooldown bool
	// Probe reports that the attempt is a probe of a cooling primary (the
	// throttle has been marked).
	Probe bool
	// Last reports that no candidate follows this one.
	Last bool
}

// plan walks the candidates of one fallback run for Run: Next returns the
// candidate to call, Failed records its failure and says whether to stop,
// Err is the outcome once no candidate is left.
type plan struct {
	req      Request
	cands    []Candidate
	next     int
	cur      int
	attempts []Attempt
	lastErr  error
}

// newPlan resolves the candidates of req.
func newPlan(req Request) (*plan, error) {
	if req.Classifier == nil {
		return nil, ErrNoClassifier
	}
	if req.Probes == nil {
		req.Probes = ProbeLog{}
	}
	return &plan{req: req, cands: Candidates(req.Config, req.Provider, req.Model, req.Override), cur: -1}, nil
}

// Attempts returns the candidates that failed or were skipped so far.
func (p *plan) Attempts() []Attempt { return p.attempts }

// Next returns the next candidate to run, recording the candidates it skips
// because their provider is cooling. ok is false when none is left; then
// Err returns the outcome.
func (p *plan) Next(now time.Time) (step Step, ok bool) {
	for p.next < len(p.cands) {
		i := p.next
		p.next++
		c := p.cands[i]
		step := Step{Candidate: c, Index: i, Primary: i == 0, Last: i == len(p.cands)-1}
		if p.req.Availability != nil {
			av := p.req.Availability(c.Provider, c.Model)
			if av.Profiles > 0 && av.AllCooling {
				skip, msg, reason := p.cooldownDecision(&step, av, now)
				if skip {
					p.attempts = append(p.attempts, Attempt{Candidate: c, Reason: reason, Error: msg, Skipped: true})
					continue
				}
			}
		}
		p.cur = i
		return step, true
	}
	p.cur = -1
	return Step{}, false
}

// cooldownDecision decides whether a candidate whose provider is cooling is
// tried anyway, marking a probe when it is.
func (p *plan) cooldownDecision(step *Step, av Availability, now time.Time) (skip bool, msg string, reason provider.Reason) {
	c := step.Candidate
	reason = av.Reason
	if reason == "" {
		reason = provider.ReasonRateLimit
	}
	switch reason {
	case provider.ReasonAuth, provider.ReasonAuthPermanent, provider.ReasonBilling:
		return true, fmt.Sprintf("Provider %s has %s issue (skipping all models)", c.Provider, reason), reason
	}
	requested := c.Provider == p.req.Provider && c.Model == p.req.Model
	probe := step.Primary && len(p.cands) > 1 &&
		!now.Before(p.req.Probes.LastProbe(c.Provider).Add(ProbeInterval)) &&
		(av.SoonestExpiry.IsZero() || !now.Before(av.SoonestExpiry.Add(-ProbeMargin)))
	// Overloaded is this port's split of the reference's rate_limit, so it
	// is as transient as a rate limit here.
	transient := reason == provider.ReasonRateLimit || reason == provider.ReasonOverloaded
	attempt := (step.Primary && (!requested || probe)) || (!step.Primary && transient) || (p.req.LastResort && step.Last)
	if !attempt {
		return true, fmt.Sprintf("Provider %s is in cooldown (all profiles unavailable)", c.Provider), reason
	}
	if step.Primary && probe {
		p.req.Probes.MarkProbe(c.Provider, now)
		step.Probe = true
	}
	step.DuringCooldown = true
	return false, "", reason
}

// Failed records that the candidate returned by the last Next failed with
// err. It returns err itself when the loop must stop at once: a user abort,
// a likely context overflow, or an error that is not a failover error on
// the last candidate. Otherwise it returns nil and the loop goes on.
func (p *plan) Failed(err error) error {
	if err == nil || p.cur < 0 {
		return nil
	}
	cls := p.req.Classifier.Classify(err)
	if cls.Abort || cls.ContextOverflow {
		return err
	}
	if cls.Reason == "" && p.cur == len(p.cands)-1 {
		return err
	}
	msg := cls.Message
	if msg == "" {
		msg = err.Error()
	}
	a := Attempt{Candidate: p.cands[p.cur], Reason: cls.Reason, Status: cls.Status, Error: msg}
	p.lastErr = err
	if cls.Reason == "" {
		a.Reason = provider.ReasonUnknown
	} else {
		p.lastErr = coerce(err, cls, msg)
	}
	p.attempts = append(p.attempts, a)
	p.cur = -1
	return nil
}

// coerce returns err as a *provider.Error carrying the classification.
func coerce(err error, cls Classification, msg string) error {
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Reason == cls.Reason {
		return err
	}
	return &provider.Error{Reason: cls.Reason, Status: cls.Status, Message: msg, Err: err}
}

// Err returns the outcome of a plan whose candidates are exhausted: with at
// most one recorded attempt, the last error (as a *provider.Error when it was
// a failover error); otherwise an *ExhaustedError.
func (p *plan) Err() error {
	if len(p.attempts) <= 1 && p.lastErr != nil {
		return p.lastErr
	}
	return &ExhaustedError{Attempts: p.attempts, Candidates: len(p.cands), Last: p.lastErr}
}

// ExhaustedError reports that every candidate failed or was skipped.
type ExhaustedError struct {
	Attempts   []Attempt
	Candidates int
	Last       error // the last candidate error, may be nil
}

// Error returns "All models failed (<n>): <p>/<m>: <error> (<reason>) | …".
func (e *ExhaustedError) Error() string {
	n := len(e.Attempts)
	if n == 0 {
		n = e.Candidates
	}
	parts := make([]string, len(e.Attempts))
	for i, a := range e.Attempts {
		parts[i] = a.Candidate.String() + ": " + a.Error
		if a.Reason != "" {
			parts[i] += " (" + string(a.Reason) + ")"
		}
	}
	summary := strings.Join(parts, " | ")
	if summary == "" {
		summary = "unknown"
	}
	return fmt.Sprintf("All models failed (%d): %s", n, summary)
}

// Unwrap returns the last candidate error.
func (e *ExhaustedError) Unwrap() error { return e.Last }

// Result is a successful fallback run.
type Result struct {
	Candidate Candidate // the candidate that succeeded
	Attempts  []Attempt // the candidates before it that failed or were skipped
}

// Run runs fn on the candidates of req in order until one succeeds, with
// the time taken from now (called once per candidate), skipping candidates
// whose provider is cooling (and probing a cooling primary when due). It
// returns:
//
//   - fn's error as is when the loop must stop at once: a user abort, a
//     likely context overflow, or an error that is not a failover error on
//     the last candidate;
//   - the context's cause when ctx ends between candidates;
//   - ErrNoClassifier for a Request without a Classifier;
//   - once every candidate failed or was skipped: with at most one recorded
//     attempt, the last error (as a *provider.Error when it was a failover
//     error), otherwise an *ExhaustedError.
func Run(ctx context.Context, req Request, now func() time.Time, fn func(ctx context.Context, step Step) error) (Result, error) {
	p, err := newPlan(req)
	if err != nil {
		return Result{}, err
	}
	for {
		if ctx.Err() != nil {
			return Result{Attempts: p.Attempts()}, context.Cause(ctx)
		}
		step, ok := p.Next(now())
		if !ok {
			return Result{Attempts: p.Attempts()}, p.Err()
		}
		err := fn(ctx, step)
		if err == nil {
			return Result{Candidate: step.Candidate, Attempts: p.Attempts()}, nil
		}
		if stop := p.Failed(err); stop != nil {
			return Result{Attempts: p.Attempts()}, stop
		}
	}
}
