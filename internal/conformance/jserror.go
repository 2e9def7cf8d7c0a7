package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
)

// JSError is an error as the cases describe one: a JavaScript error object
// with a class name ("AbortError", "TimeoutError", "FailoverError"), message,
// HTTP status, system error code ("ETIMEDOUT") and cause, or a FailoverError
// with its reason.
type JSError struct {
	Name       string          `json:"name"`
	Message    string          `json:"message"`
	Status     json.RawMessage `json:"status"`     // a number or a numeric string
	StatusCode json.RawMessage `json:"statusCode"` // the same, as some clients name it
	Code       string          `json:"code"`
	// Reason is a FailoverError's reason, or an AbortError's abort reason
	// (an error or a string).
	Reason *JSValue        `json:"reason"`
	Fail   provider.Reason `json:"failover"` // a FailoverError's reason, as model-fallback.json spells it
	Cause  *JSValue        `json:"cause"`    // an error or a string
}

// JSValue is a value a JavaScript error holds where another error may be:
// an error object, or a string.
type JSValue struct {
	Text string
	Err  *JSError
}

// UnmarshalJSON reads a string or an error object.
func (v *JSValue) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &v.Text); err == nil {
		return nil
	}
	v.Err = &JSError{}
	return strict(data, v.Err)
}

// timeoutHint reports what the reference's hasTimeoutHint does: an error
// named TimeoutError, or a message (or string) that reads as a timeout.
func (v *JSValue) timeoutHint() bool {
	switch {
	case v == nil:
		return false
	case v.Err != nil:
		return v.Err.Name == "TimeoutError" || failover.IsTimeoutError(errors.New(v.Err.Message))
	}
	return failover.IsTimeoutError(errors.New(v.Text))
}

// failoverReason is a FailoverError's reason, "" when e has none.
func (e *JSError) failoverReason() provider.Reason {
	if e.Fail != "" {
		return e.Fail
	}
	if e.Reason != nil && e.Reason.Err == nil && e.Name != "AbortError" {
		return provider.Reason(e.Reason.Text)
	}
	return ""
}

// status is e's HTTP status (status, else statusCode: a number or a
// string of digits), 0 when none.
func (e *JSError) status() int {
	for _, raw := range []json.RawMessage{e.Status, e.StatusCode} {
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			if i, err := n.Int64(); err == nil && i > 0 {
				return int(i)
			}
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if i, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && i > 0 {
				return i
			}
		}
	}
	return 0
}

// awsException is the name the AWS SDKs give a service's error.
var awsException = regexp.MustCompile(`^[A-Z][A-Za-z]*Exception$`)

// abortedRequest is how a JavaScript HTTP client words an abort its own
// request timer caused.
var abortedRequest = regexp.MustCompile(`(?i)request (?:was )?aborted`)

// timedOut reports whether e is what a JavaScript runtime throws when a
// deadline passes: a TimeoutError, or an AbortError its request timer
// caused (its message, its cause or its abort reason says so).
func (e *JSError) timedOut() bool {
	switch e.Name {
	case "TimeoutError":
		return true
	case "AbortError":
		return abortedRequest.MatchString(e.Message) || e.Cause.timeoutHint() || e.Reason.timeoutHint()
	}
	return false
}

// systemCodes are Node's network error codes as Go's errors (Node's
// ESOCKETTIMEDOUT, a socket timeout of its own, is Go's ETIMEDOUT).
var systemCodes = map[string]syscall.Errno{
	"ETIMEDOUT": syscall.ETIMEDOUT, "ESOCKETTIMEDOUT": syscall.ETIMEDOUT, "ECONNRESET": syscall.ECONNRESET,
	"ECONNABORTED": syscall.ECONNABORTED, "ECONNREFUSED": syscall.ECONNREFUSED, "EPIPE": syscall.EPIPE,
	"EHOSTUNREACH": syscall.EHOSTUNREACH, "ENETUNREACH": syscall.ENETUNREACH,
}

// Err returns the Go error the fleet sees where the reference sees e, so
// that a case runs through the classification production uses:
//
//   - a FailoverError is a *provider.Error with its reason and status;
//   - an AWS SDK error (a name such as "ThrottlingException" and an HTTP
//     status, as the AWS SDKs report a Bedrock failure) is what the
//     Bedrock adapter builds from it (failover.FromAWS);
//   - an error with an HTTP status is what an adapter builds from the
//     response (failover.FromHTTP with the message as the body);
//   - a TimeoutError, or an AbortError caused by a request timer, wraps
//     context.DeadlineExceeded (Go's form of a passed deadline); another
//     AbortError wraps context.Canceled (the caller gave up);
//   - a system error code wraps the syscall error;
//   - anything else is an error with the message.
//
// JSErrorOf recovers e from the result.
func (e *JSError) Err() error {
	self := &jsErr{js: e}
	switch reason := e.failoverReason(); {
	case e.Name == "FailoverError" || reason != "":
		return &provider.Error{Reason: reason, Status: e.status(), Message: e.Message, Err: self}
	case e.status() != 0 && awsException.MatchString(e.Name):
		return failover.FromAWS(e.status(), nil, e.Name, e.Message, self, time.Time{})
	case e.status() != 0:
		return failover.FromHTTP(e.status(), nil, []byte(e.Message), self, time.Time{})
	case e.timedOut():
		self.cause = context.DeadlineExceeded
	case e.Name == "AbortError":
		self.cause = context.Canceled
	case systemCodes[strings.ToUpper(e.Code)] != 0:
		self.cause = systemCodes[strings.ToUpper(e.Code)]
	}
	return self
}

// jsErr is a case error in Go: its message, and the Go error it stands for.
type jsErr struct {
	js    *JSError
	cause error
}

func (e *jsErr) Error() string { return e.js.Message }
func (e *jsErr) Unwrap() error { return e.cause }

// JSErrorOf returns the case error err was made from by JSError.Err.
func JSErrorOf(err error) (*JSError, bool) {
	var je *jsErr
	if errors.As(err, &je) {
		return je.js, true
	}
	return nil, false
}

// ReferenceReason is how the reference names a Lanefleet failover reason:
// nil for a reason that is no failover reason there (context overflow, role
// ordering, image size, aborted, unknown), rate_limit for overloaded (the
// reference does not tell them apart), the reason itself otherwise.
func ReferenceReason(r provider.Reason) any {
	switch {
	case !failover.IsFailover(r):
		return nil
	case r == provider.ReasonOverloaded:
		return string(provider.ReasonRateLimit)
	}
	return string(r)
}
