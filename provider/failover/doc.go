// Package failover classifies provider failures: it turns an HTTP status, an
// error body, an error message or a Go error into the failover reason the run
// loop and the model-fallback logic branch on (rate_limit, overloaded, auth,
// auth_permanent, billing, timeout, format, model_not_found,
// context_overflow, role_ordering, image_size), reads server-requested retry
// delays, rewrites raw provider errors into user-facing text, and picks a
// lower thinking level from an "unsupported value" error.
//
// Everything here is pure: functions take values and return values, keep no
// state and do no I/O, so any goroutine may call them.
//
// Two views of a message exist side by side:
//
//   - [FailoverReason] and [Classify] reproduce the reference runtime
//     (OpenClaw v2026.2.27 classifyFailoverReason and its classifier flags)
//     exactly, quirks included: overloaded maps to rate_limit, a context
//     overflow has no failover reason, the bare substring "tpm" is a rate
//     limit. The conformance cases pin these.
//   - [ClassifyMessage], [ClassifyHTTP] and [ClassifyError] are what adapters
//     and the run loop use: they start from the reference order but keep
//     overloaded, context_overflow, role_ordering and image_size apart, know
//     provider error codes (context_length_exceeded, insufficient_quota,
//     API_KEY_INVALID, …) and a few provider wordings the reference misses.
//     The conformance cases pin them too: a case's message through
//     ClassifyMessage, and a case's error object (as the Go error the fleet
//     sees instead) through ClassifyError, must give the reference's reason
//     once overloaded is folded into rate_limit.
package failover
