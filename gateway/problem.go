package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// Problem is an RFC 9457 problem details object, with a Code extension
// that names the condition as a stable word a program can branch on: the
// names of the Go client's errors (ErrLaneFull is lane_full), the run
// error kinds (invalid_input) and the gateway's own (unauthorized,
// rate_limited, body_too_large…).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
	// RetryAfter, when set, is also sent as the Retry-After header
	// (seconds).
	RetryAfter int `json:"retryAfter,omitempty"`
}

// Problem codes of the gateway itself; the fleet's come from the client's
// errors (see problemOf).
const (
	CodeUnauthorized  = "unauthorized"           // no or an unknown bearer token
	CodeForbidden     = "forbidden"              // the token's role may not do this
	CodeNotFound      = "not_found"              // no such route, session (for this caller), dead letter or call
	CodeRateLimited   = "rate_limited"           // the token's rate or concurrency limit
	CodeBodyTooLarge  = "body_too_large"         // the body exceeds the gateway's limit
	CodeMediaType     = "unsupported_media_type" // the body is not application/json
	CodeBadJSON       = "bad_json"               // the body does not decode
	CodeInvalidInput  = events.KindInvalidInput  // a value the fleet would refuse
	CodeOverloaded    = "overloaded"             // the gateway holds as many streams as it may
	CodeNoFleet       = "no_fleet"               // lanefleet.ErrNoFleet
	CodeUnknownRun    = "unknown_run"            // lanefleet.ErrUnknownRun
	CodeSessionBusy   = "session_busy"           // lanefleet.ErrSessionBusy
	CodeNotEmpty      = "not_empty"              // lanefleet.ErrNotEmpty
	CodeTooLarge      = "too_large"              // lanefleet.ErrTooLarge
	CodePermission    = "permission_denied"      // lanefleet.ErrPermission: the gateway's NATS user was refused
	CodeLaneFull      = "lane_full"              // lanefleet.ErrLaneFull
	CodeUnacked       = "unacknowledged"         // lanefleet.ErrUnacknowledged
	CodeTimeout       = "timeout"                // the fleet did not answer in time
	CodeFleetError    = "fleet_error"            // anything else the fleet answered
	CodeMethodAllowed = "method_not_allowed"     // the route exists for other methods
)

// problemTypeBase prefixes a problem's type URI; the code follows it.
const problemTypeBase = "urn:lanefleet:problem:"

// newProblem returns the problem status with code and detail.
func newProblem(status int, code, detail string) *Problem {
	return &Problem{Type: problemTypeBase + code, Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// problemf is newProblem with a formatted detail.
func problemf(status int, code, format string, args ...any) *Problem {
	return newProblem(status, code, fmt.Sprintf(format, args...))
}

// problemOf maps an error of the Go client to the problem the caller sees.
// The detail of a fleet error the caller cannot act on stays generic (the
// gateway logs the error itself).
func problemOf(err error) *Problem {
	var de *events.DecodeError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return problemf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the body exceeds %d bytes", mbe.Limit)
	case errors.As(err, &de):
		return newProblem(http.StatusBadRequest, CodeInvalidInput, de.Detail())
	case errors.Is(err, lanefleet.ErrLaneFull):
		p := newProblem(http.StatusTooManyRequests, CodeLaneFull, "the session has as many messages queued as the fleet lets one session queue; send again once its runs have taken some")
		p.RetryAfter = 5
		return p
	case errors.Is(err, lanefleet.ErrTooLarge):
		return newProblem(http.StatusRequestEntityTooLarge, CodeTooLarge, "the message is larger than the fleet accepts")
	case errors.Is(err, lanefleet.ErrUnknownRun):
		return newProblem(http.StatusNotFound, CodeUnknownRun, "the session has no such run (a wrong id, or its events expired)")
	case errors.Is(err, lanefleet.ErrNotFound):
		return newProblem(http.StatusNotFound, CodeNotFound, "not found")
	case errors.Is(err, lanefleet.ErrSessionBusy):
		return newProblem(http.StatusConflict, CodeSessionBusy, "a worker is running the session; try again when it is idle")
	case errors.Is(err, lanefleet.ErrNotEmpty):
		return newProblem(http.StatusConflict, CodeNotEmpty, "the session already has a transcript")
	case errors.Is(err, lanefleet.ErrUnacknowledged):
		return newProblem(http.StatusBadGateway, CodeUnacked, "the message went out but its acknowledgement did not come back: send it again with the same Idempotency-Key, never as a new message")
	case errors.Is(err, lanefleet.ErrPermission):
		return newProblem(http.StatusBadGateway, CodePermission, "the gateway's NATS user may not do this (see docs/gateway.md, \"The gateway's NATS user\", for the role it needs)")
	case errors.Is(err, lanefleet.ErrNoFleet), errors.Is(err, nats.ErrNoResponders):
		return newProblem(http.StatusServiceUnavailable, CodeNoFleet, "no worker answers: start a worker first")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return newProblem(http.StatusGatewayTimeout, CodeTimeout, "the fleet did not answer in time")
	}
	return newProblem(http.StatusBadGateway, CodeFleetError, "the fleet could not do this; the gateway's log says why")
}

// writeProblem writes p: as problem+json, or in the OpenAI error shape on
// the /v1/ routes, whose SDKs parse that.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	h := w.Header()
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	if p.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="lanefleet"`)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	if r != nil && strings.HasPrefix(r.URL.Path, "/v1/") {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(p.Status)
		_ = json.NewEncoder(w).Encode(openAIError{Error: openAIErrorBody{Message: p.Detail, Type: openAIType(p.Status), Code: p.Code}})
		return
	}
	h.Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// openAIError is the error shape of the OpenAI API.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// openAIType is the OpenAI error type of an HTTP status.
func openAIType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status < 500:
		return "invalid_request_error"
	}
	return "server_error"
}
