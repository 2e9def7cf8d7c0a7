package remote

import "errors"

// Sentinels that a remote tool's *Error wraps; test with errors.Is.
var (
	// ErrUnavailable: no process serves the tool (NATS had no responders)
	// or the one that got the call was stopping.
	ErrUnavailable = errors.New("remote: tool not available")
	// ErrTimeout: no reply came within the call timeout or the context's
	// deadline.
	ErrTimeout = errors.New("remote: tool timed out")
	// ErrToolFailed: the service answered with an error reply (the tool
	// returned an error or panicked, or the service rejected the call).
	ErrToolFailed = errors.New("remote: tool failed")
	// ErrBadReply: the reply could not be decoded.
	ErrBadReply = errors.New("remote: malformed reply")
	// ErrLost: the process running the call stopped sending heartbeats
	// (it was killed, or cut off from NATS) before it replied. The call
	// may have taken effect in part.
	ErrLost = errors.New("remote: tool server stopped answering")
	// ErrStopped is the cause of the context a served call runs with when
	// its Service is stopped before the call returns.
	ErrStopped = errors.New("remote: service stopped")
)

// Error is what a remote tool's Call returns on failure. Its message is
// written for the model, which sees it as an isError tool result; Err holds
// the cause for programs.
type Error struct {
	// Tool is the tool's name.
	Tool string
	// Code is the service's Nats-Service-Error-Code (see the Code
	// constants), "" when the failure happened on the caller's side.
	Code string
	// Message is the text the model sees.
	Message string
	// Err is one of the sentinels of this package or the underlying cause
	// (a context or NATS error).
	Err error
}

// Error returns Message.
func (e *Error) Error() string { return e.Message }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }
