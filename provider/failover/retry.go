package failover

import (
	"context"
	"errors"
	"regexp"

	"github.com/lanefleet/lanefleet/provider"
)

// retryableRe is pi's auto-retry wording (pi-coding-agent AgentSession at the
// reference's pi version, llm-layer spec §5.7). Like the reference's rate
// limit pattern it matches "429" inside any number.
var retryableRe = regexp.MustCompile(`(?i)overloaded|rate.?limit|too many requests|429|500|502|503|504|service.?unavailable|server error|internal error|connection.?error|connection.?refused|other side closed|fetch failed|upstream.?connect|reset before headers|terminated|retry delay`)

// IsRetryable reports whether a model call that failed with err (text is
// the failed reply's error message) is worth repeating on the same key after
// a pause: pi's auto-retry, which runs before the run loop sees a failure.
//
// pi decides on the text alone: not a context overflow, and the text names
// an overload, a rate limit, a 429 or 5xx status, or a dropped connection.
// Lanefleet classifies first (ClassifyError, or ClassifyMessage without an
// error) and lets the class decide where it is known: rate_limit,
// overloaded and timeout (a 408/5xx status, a reset or truncated
// connection, an unrecognised error inside a 200 stream) are retried;
// billing, auth, format, model_not_found, context overflow, image size,
// role ordering and aborts are not, even when their text holds "429" (an
// exhausted quota answered with HTTP 429 is billing, and waiting does not
// refill it). Only an unknown class falls back to pi's wording. A
// cancelled or expired context is never retried: the caller ends the run.
func IsRetryable(err error, text string) bool {
	reason := ClassifyError(err)
	if err == nil {
		reason = ClassifyMessage(text)
	}
	switch reason {
	case provider.ReasonRateLimit, provider.ReasonOverloaded:
		return true
	case provider.ReasonTimeout:
		return !isContextDone(err)
	case provider.ReasonUnknown:
		// pi's SDKs put the status in the text; an adapter's error keeps
		// it apart.
		var pe *provider.Error
		if errors.As(err, &pe) && (pe.Status == 429 || pe.Status >= 500) {
			return true
		}
		return !IsLikelyContextOverflow(text) && retryableRe.MatchString(text)
	}
	return false
}

// isContextDone reports a context's own end (cancelled or past its
// deadline), which is the caller's decision, not the provider's failure.
func isContextDone(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
