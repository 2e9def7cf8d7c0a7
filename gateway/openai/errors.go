package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// apiError is an error in OpenAI's shape: the official SDKs pick their
// exception class by the status, and read message, type, param and code
// from the body.
type apiError struct {
	status int
	typ    string
	param  string
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// body is the error as OpenAI sends it: {"error":{"message","type","param","code"}}.
func (e *apiError) body() any {
	type detail struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	d := detail{Message: e.msg, Type: e.typ}
	if e.param != "" {
		d.Param = &e.param
	}
	if e.code != "" {
		d.Code = &e.code
	}
	return struct {
		Error detail `json:"error"`
	}{d}
}

// typeOf is OpenAI's error type for a status.
func typeOf(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// asAPIError maps what a handler met to the error the caller gets: the
// gateway's own refusals, the Go client's errors, and a run's error.
func asAPIError(err error) *apiError {
	var (
		ae *apiError
		ce *convError
		de *events.DecodeError
		re *lanefleet.RunError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ce):
		return &apiError{status: ce.status, typ: "invalid_request_error", param: ce.param, code: ce.code, msg: ce.msg}
	case errors.Is(err, errNotFound):
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", msg: "not found (or not yours)"}
	case errors.Is(err, errNoPrefix):
		return &apiError{status: http.StatusForbidden, typ: "permission_error", msg: err.Error()}
	case errors.As(err, &de):
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: de.Field, msg: de.Error()}
	case errors.As(err, &re):
		return runError(re.Kind, re.Message)
	case errors.Is(err, lanefleet.ErrUnknownRun):
		return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", msg: "no such response (or its events expired)"}
	case errors.Is(err, lanefleet.ErrLaneFull):
		return &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "lane_full", msg: "the session has as many messages queued as the fleet allows; try again when its runs have taken some"}
	case errors.Is(err, lanefleet.ErrTooLarge), errors.Is(err, events.ErrTooLarge):
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", msg: "the message is larger than the fleet takes"}
	case errors.Is(err, lanefleet.ErrNotEmpty), errors.Is(err, lanefleet.ErrSessionBusy):
		return &apiError{status: http.StatusConflict, typ: "invalid_request_error", code: "conversation_mismatch", msg: "the session already has a conversation; send only the new input"}
	case errors.Is(err, lanefleet.ErrNoFleet):
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", msg: "no fleet answers (start a worker)"}
	case errors.Is(err, lanefleet.ErrPermission):
		return &apiError{status: http.StatusForbidden, typ: "permission_error", msg: "the gateway's fleet credentials may not reach this session"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, typ: "server_error", msg: "the fleet did not answer in time"}
	}
	return &apiError{status: http.StatusInternalServerError, typ: "server_error", msg: "internal error"}
}

// runError maps a run's error kind to a status: what the caller sent is
// 400, what the queue refused 409 or 429, what failed upstream 502.
func runError(kind, msg string) *apiError {
	status := http.StatusInternalServerError
	code := kind
	switch kind {
	case events.KindInvalidInput, "role_ordering", "image_size":
		status = http.StatusBadRequest
	case "context_overflow":
		status, code = http.StatusBadRequest, "context_length_exceeded"
	case events.KindRejected, events.KindInterrupted:
		status = http.StatusConflict
	case events.KindDropped:
		status = http.StatusTooManyRequests
	case "provider_error", "retry_limit":
		status = http.StatusBadGateway
	}
	return &apiError{status: status, typ: typeOf(status), code: code, msg: msg}
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.typ == "" {
		e.typ = typeOf(e.status)
	}
	writeJSON(w, e.status, e.body())
}

// fail writes err as the caller's error, logging what it hides.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := asAPIError(err)
	if e.status >= 500 {
		a.opt.Logger.Warn().Err(err).Str("path", r.URL.Path).Msg("openai: request failed")
	}
	writeError(w, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
