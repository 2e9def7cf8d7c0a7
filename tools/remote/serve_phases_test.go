package remote

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestParseCallLimits: the timeout and heartbeat headers are positive
// milliseconds; the heartbeat period is kept between HeartbeatMin and an
// hour; anything else is a bad request naming the header.
func TestParseCallLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		hdr     map[string]string
		timeout time.Duration
		every   time.Duration
		bad     string
	}{
		{"none", nil, 0, 0, ""},
		{"timeout", map[string]string{HeaderTimeout: "1500"}, 1500 * time.Millisecond, 0, ""},
		{"heartbeat", map[string]string{HeaderHeartbeat: "2000"}, 0, 2 * time.Second, ""},
		{"heartbeat raised to the minimum", map[string]string{HeaderHeartbeat: "1"}, 0, HeartbeatMin, ""},
		{"heartbeat cut to an hour", map[string]string{HeaderHeartbeat: "999999999999"}, 0, time.Hour, ""},
		{"zero timeout", map[string]string{HeaderTimeout: "0"}, 0, 0, HeaderTimeout},
		{"timeout not a number", map[string]string{HeaderTimeout: "soon"}, 0, 0, HeaderTimeout},
		{"negative heartbeat", map[string]string{HeaderTimeout: "10", HeaderHeartbeat: "-5"}, 0, 0, HeaderHeartbeat},
	} {
		hdr := nats.Header{}
		for k, v := range tc.hdr {
			hdr.Set(k, v)
		}
		lim, bad := parseCallLimits("t", hdr)
		switch {
		case tc.bad != "":
			if !strings.Contains(bad, tc.bad) || !strings.HasPrefix(bad, "tool t got a malformed") {
				t.Errorf("%s: bad request %q, want one naming %s", tc.name, bad, tc.bad)
			}
		case bad != "" || lim.timeout != tc.timeout || lim.beatEvery != tc.every:
			t.Errorf("%s: %+v %q; want timeout %v, heartbeat %v", tc.name, lim, bad, tc.timeout, tc.every)
		}
	}
}

// TestCallFailure: a call stopped by the shutdown, cancelled or timed out
// by its caller says so (a stopped one with its idempotency key); any other
// failure is the tool's error.
func TestCallFailure(t *testing.T) {
	t.Parallel()
	cancelled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		key  string
		code string
		msg  string
	}{
		{"stopped", cancelled(ErrStopped), "", CodeToolFailed, "tool t was stopped before it finished: the process serving it is shutting down"},
		{"stopped with a key", cancelled(ErrStopped), "k1", CodeToolFailed, "; it may have taken effect in part (idempotency key k1)"},
		{"cancelled by the caller", cancelled(errCallerCancelled), "", CodeToolFailed, "tool t was cancelled by its caller"},
		{"timed out", cancelled(errCallerTimeout), "", CodeTimeout, "tool t timed out after 2s"},
		{"the tool's error", context.Background(), "", CodeToolFailed, "disk full"},
	} {
		code, msg := callFailure(tc.ctx, "t", tc.key, 2*time.Second, errors.New("disk full"))
		if code != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %s %q, want %s with %q", tc.name, code, msg, tc.code, tc.msg)
		}
	}
}
