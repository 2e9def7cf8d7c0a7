package runner

import (
	"context"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
)

// RetryPolicy is the same-key retry of transient provider failures, pi's
// auto-retry (llm-layer spec §5.7): a model call whose reply failed with an
// error failover.IsRetryable accepts is made again with the same key after
// BaseDelay·2^(n−1) (2 s, 4 s, 8 s), at most MaxRetries times in a row (a
// successful call starts the count again), before the run loop sees the
// failure and marks, rotates or falls back. pi keeps a retried failure in
// its file; Lanefleet keeps only the failure that stands (a transcript of
// identical failed replies tells a reader nothing the retrying events do
// not, and errored replies are never sent to a model again).
//
// Lanefleet's additions: a server-requested delay (Retry-After) longer than
// the backoff is waited instead, and one longer than MaxDelay is not waited
// for on this key (pi's maxRetryDelayMs); a rate limit is not retried on
// the same key when another auth profile is ready to take over (rotation
// serves the run sooner: a rate limit belongs to the key, an overload or a
// 5xx to the provider); and no wait outlasts the attempt's timeout.
type RetryPolicy struct {
	// MaxRetries is how many times in a row a call is retried; 0 =
	// RetryMaxDefault, negative = never.
	MaxRetries int
	// BaseDelay is the first wait; 0 = RetryBaseDelayDefault.
	BaseDelay time.Duration
	// MaxDelay caps the wait; a longer Retry-After ends the retries.
	// 0 = RetryMaxDelayDefault.
	MaxDelay time.Duration
}

// Retry defaults (pi's retry settings).
const (
	RetryMaxDefault       = 3
	RetryBaseDelayDefault = 2 * time.Second
	RetryMaxDelayDefault  = 60 * time.Second
)

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxRetries == 0 {
		p.MaxRetries = RetryMaxDefault
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = RetryBaseDelayDefault
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = RetryMaxDelayDefault
	}
	return p
}

// Delay is the wait before retry n (1-based) of a call that failed with a
// server-requested delay retryAfter (0 = none): the backoff, or retryAfter
// when longer. ok is false when retry n is not made: past MaxRetries, or
// the wait would exceed MaxDelay.
func (p RetryPolicy) Delay(n int, retryAfter time.Duration) (d time.Duration, ok bool) {
	if n < 1 || n > p.MaxRetries {
		return 0, false
	}
	d = backoff.Policy{Base: p.BaseDelay}.Delay(n)
	d = max(d, retryAfter)
	if d > p.MaxDelay {
		return 0, false
	}
	return d, true
}

// retryWait decides whether the failed reply am (err the call's error) is
// retried on the same key as retry n of the attempt, and how long to wait
// first. ctx is the attempt's: a wait that would outlast it is not made.
func (ru *run) retryWait(ctx context.Context, req attemptReq, am *message.Message, err error, n int) (time.Duration, bool) {
	if am.StopReason != message.StopError || !failover.IsRetryable(err, am.ErrorMessage) {
		return 0, false
	}
	if req.canRotate && failover.ClassifyError(orText(err, am.ErrorMessage)) == provider.ReasonRateLimit {
		return 0, false
	}
	d, ok := ru.r.cfg.Retry.Delay(n, retryAfter(err))
	if !ok {
		return 0, false
	}
	if dl, has := ctx.Deadline(); has && time.Until(dl) <= d {
		return 0, false
	}
	return d, true
}

// pause waits d, showing the wait as a lifecycle retrying event (retry n
// of the policy's most, 0 for a cooldown wait; why is the failure), and
// its end as a lifecycle retry event. It returns ctx's error when ctx
// ends first.
func (ru *run) pause(ctx context.Context, d time.Duration, n int, why string) error {
	most := 0
	if n > 0 {
		most = ru.r.cfg.Retry.MaxRetries
	}
	ru.sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseRetrying, Attempt: n, MaxAttempts: most, DelayMs: d.Milliseconds(), Error: why})
	if err := backoff.Sleep(ctx, d); err != nil {
		return err
	}
	ru.sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseRetry, Attempt: n, MaxAttempts: most})
	return nil
}

// retryWhy says why a failed call is retried: its kind (failover.Label)
// and the provider's message.
func retryWhy(err error, text string) string {
	label := failover.Label(orText(err, text))
	if label == "" || text == "" {
		return label + text
	}
	return label + ": " + text
}
