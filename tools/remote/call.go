package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
)

// headerRoom is what a request keeps free of its max payload for headers.
const headerRoom = 1024

// remoteTool is a tool served by some process on the NATS system.
type remoteTool struct {
	nc       *nats.Conn
	spec     provider.Tool
	subject  string
	timeout  time.Duration
	maxChars int
	mux      *updateMux // every call's replies, heartbeats and partial results
	// heartbeat is the interval the call asks the service to beat at
	// (HeaderHeartbeat).
	heartbeat time.Duration
	// idempotent: the service declares the tool safe to call again
	// (MetaIdempotent).
	idempotent bool
}

// Idempotent implements tools.Idempotent as the service declares it.
func (t *remoteTool) Idempotent() bool { return t.idempotent }

// Spec implements tools.Tool with the spec from the endpoint's metadata.
func (t *remoteTool) Spec() provider.Tool { return t.spec }

// Call implements tools.Tool: one request to the tool's subject, bounded by
// the call timeout and ctx. Every failure is an *Error. A call that a
// stopping instance refused without running it is sent once more, as
// another instance may serve it.
func (t *remoteTool) Call(ctx context.Context, call tools.Call) (tools.Result, error) {
	name := t.spec.Name
	ri := RunInfoFrom(ctx)
	body, err := json.Marshal(request{ID: call.ID, Name: name, Args: call.Args, SessionKey: ri.SessionKey, RunID: ri.RunID})
	if err != nil {
		return tools.Result{}, &Error{Tool: name, Message: fmt.Sprintf("tool %s: arguments cannot be encoded as JSON: %v", name, err), Err: err}
	}
	if limit := t.nc.MaxPayload() - headerRoom; limit > 0 && int64(len(body)) > limit {
		return tools.Result{}, &Error{Tool: name, Message: fmt.Sprintf("tool %s: arguments too large (%d bytes; the limit is %d)", name, len(body), limit), Err: nats.ErrMaxPayload}
	}

	// limit is how long this call may take, for error messages.
	limit := t.timeout
	if dl, ok := ctx.Deadline(); ok {
		limit = max(0, min(limit, time.Until(dl)))
	}
	cctx, cancel := context.WithTimeoutCause(ctx, t.timeout, ErrTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		res, err := t.roundTrip(cctx, limit, body, call.Key, call.Update)
		var e *Error
		if attempt == 0 && errors.As(err, &e) && e.Code == CodeUnavailable && cctx.Err() == nil {
			continue
		}
		return res, err
	}
}

// roundTrip sends one request and turns the outcome into a result or an
// *Error.
func (t *remoteTool) roundTrip(ctx context.Context, limit time.Duration, body []byte, key string, update func(tools.Result)) (tools.Result, error) {
	name := t.spec.Name
	msg := &nats.Msg{Subject: t.subject, Header: nats.Header{}, Data: body}
	if key != "" {
		msg.Header.Set(HeaderIdempotencyKey, key)
	}
	token := nuid.Next()
	msg.Header.Set(HeaderCallToken, token)
	if dl, ok := ctx.Deadline(); ok {
		msg.Header.Set(HeaderTimeout, strconv.FormatInt(max(1, time.Until(dl).Milliseconds()), 10))
	}
	msg.Header.Set(HeaderHeartbeat, strconv.FormatInt(t.heartbeat.Milliseconds(), 10))
	if update != nil {
		msg.Header.Set(HeaderUpdates, "1")
	}
	silence := HeartbeatMisses * t.heartbeat
	rep, err := t.mux.request(ctx, msg, t.maxChars, silence, update)
	if errors.Is(err, errLost) {
		// The service may be alive but cut off: have it stop the call.
		t.cancel(token, false)
		text := fmt.Sprintf("tool %s's server stopped answering (no heartbeat for %s); the call may have taken effect in part", name, roundDuration(silence))
		if key != "" {
			text += fmt.Sprintf(" (idempotency key %s)", key)
		}
		return tools.Result{}, &Error{Tool: name, Message: text, Err: ErrLost}
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, nats.ErrNoResponders) {
			t.cancel(token, errors.Is(context.Cause(ctx), ErrTimeout) || errors.Is(ctx.Err(), context.DeadlineExceeded))
		}
		return tools.Result{}, t.requestError(ctx, limit, err)
	}
	if code := rep.Header.Get(micro.ErrorCodeHeader); code != "" {
		text := rep.Header.Get(micro.ErrorHeader)
		var eb errorBody
		if json.Unmarshal(rep.Data, &eb) == nil && eb.Error != "" {
			text = eb.Error
		}
		if text == "" {
			text = fmt.Sprintf("tool %s failed (code %s)", name, code)
		}
		text = capString(text, t.maxChars)
		cause := ErrToolFailed
		switch code {
		case CodeUnavailable:
			cause = ErrUnavailable
		case CodeTimeout:
			// The service ended the call at the deadline the caller
			// sent, a moment before the caller's own timer.
			cause, text = ErrTimeout, timeoutText(name, limit)
		}
		return tools.Result{}, &Error{Tool: name, Code: code, Message: text, Err: cause}
	}
	res, err := decodeResult(rep.Data, t.maxChars)
	if err != nil {
		return tools.Result{}, &Error{Tool: name, Message: fmt.Sprintf("tool %s sent a malformed reply: %v", name, err), Err: fmt.Errorf("%w: %w", ErrBadReply, err)}
	}
	return res, nil
}

// cancel tells the instances serving the tool that the call of token is
// no longer awaited (its run was stopped, or it timed out), so the one
// running it stops it. Best effort: a lost cancel leaves the call to the
// timeout the service was sent.
func (t *remoteTool) cancel(token string, timedOut bool) {
	hdr := nats.Header{HeaderCallToken: []string{token}}
	if timedOut {
		hdr.Set(HeaderCancelReason, "timeout")
	}
	_ = t.nc.PublishMsg(&nats.Msg{Subject: CancelSubject(t.spec.Name), Header: hdr})
}

// requestError explains a failed request.
func (t *remoteTool) requestError(ctx context.Context, limit time.Duration, err error) error {
	name := t.spec.Name
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return &Error{Tool: name, Message: fmt.Sprintf("tool %s is not available: no process serves it", name), Err: fmt.Errorf("%w: %w", ErrUnavailable, err)}
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrTimeout):
		return &Error{Tool: name, Message: timeoutText(name, limit), Err: ErrTimeout}
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The caller's own deadline (the run's budget) came first.
		return &Error{Tool: name, Message: timeoutText(name, limit), Err: fmt.Errorf("%w: %w", ErrTimeout, context.Cause(ctx))}
	case ctx.Err() != nil:
		return &Error{Tool: name, Message: fmt.Sprintf("tool %s was cancelled: %v", name, context.Cause(ctx)), Err: context.Cause(ctx)}
	default:
		return &Error{Tool: name, Message: fmt.Sprintf("tool %s could not be called: %v", name, err), Err: err}
	}
}

func timeoutText(name string, limit time.Duration) string {
	return fmt.Sprintf("tool %s timed out after %s", name, roundDuration(limit))
}

// roundDuration makes a duration short to read: whole seconds from 10 s,
// milliseconds below.
func roundDuration(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// capString cuts an error text like a result text.
func capString(s string, maxChars int) string {
	b := capText([]message.Block{message.Text(s)}, maxChars)
	return b[0].Text
}
