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
//     and the run loop use. They follow the reference's own tables (runtime
//     spec §14-§15): a text gets the reference's failover reason; an HTTP
//     failure its status table (402 billing, 429 rate_limit, 401/403 auth or
//     auth_permanent, 408 and 502-504 timeout, 400 format) and otherwise its
//     text; a Go error its reason, timeout for the network error codes the
//     reference names (ECONNRESET, ECONNABORTED, ETIMEDOUT) and for a
//     timeout-like error ([IsTimeoutError]), and otherwise its text. Where
//     the reference has no failover reason they name what it handles on
//     other paths (context_overflow, role_ordering, image_size), and they
//     keep overloaded apart from rate_limit. Deliberate differences, each
//     documented where it is decided: a provider's machine-readable code
//     beats the status (context_length_exceeded, insufficient_quota sent as
//     429, API_KEY_INVALID sent as 400, model_not_found); a 400 whose body
//     is a billing error or an overflow is that, and a 503 whose body says
//     overloaded is overloaded (the recorded provider bodies of
//     shared/wire); and the two texts [ClassifyMessage] names. The conformance
//     cases pin them: a case's message through ClassifyMessage, and a
//     case's error object (as the Go error the fleet sees instead) through
//     ClassifyError and IsTimeoutError, must give the reference's answer
//     once overloaded is folded into rate_limit.
package failover
