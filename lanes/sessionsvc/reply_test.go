package sessionsvc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/internal/inflight"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// TestReplier: what a Replier's handler answers for each way a request can
// end, on a real micro endpoint: the value (msgpack), an *Error's code and
// description, any other error as unavailable, a panic as internal, a
// value that does not encode as internal, and a request that comes while
// the service stops as unavailable.
func TestReplier(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	g := inflight.New(2)
	r := &sessionsvc.Replier{NC: nc, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.Disabled), Name: "test service",
		Inflight: g, Timeout: time.Minute}
	answers := map[string]func(ctx context.Context, q *sessionsvc.Request) (any, error){
		"value": func(_ context.Context, q *sessionsvc.Request) (any, error) {
			return map[string]string{"got": string(q.Data)}, nil
		},
		"coded": func(context.Context, *sessionsvc.Request) (any, error) {
			return nil, &sessionsvc.Error{Code: sessionsvc.CodeBadRequest, Description: "no\nsuch"}
		},
		"plain":    func(context.Context, *sessionsvc.Request) (any, error) { return nil, errors.New("store down") },
		"panics":   func(context.Context, *sessionsvc.Request) (any, error) { panic("boom") },
		"badvalue": func(context.Context, *sessionsvc.Request) (any, error) { return func() {}, nil },
		"deadline": func(ctx context.Context, _ *sessionsvc.Request) (any, error) {
			_, ok := ctx.Deadline()
			return ok, nil
		},
	}
	svc, err := micro.AddService(nc, micro.Config{Name: "replier_test", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for op, answer := range answers {
		if err := svc.AddEndpoint(op, r.Handler(op, answer), micro.WithEndpointSubject("replier."+op)); err != nil {
			t.Fatal(err)
		}
	}
	// The endpoints' subscriptions reach the server before another
	// connection asks (a request first got "no responders" once).
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	client := natstest.Connect(t, srv.URL)
	ask := func(op string) *nats.Msg {
		t.Helper()
		m, err := client.Request("replier."+op, []byte("hi"), time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return m
	}
	tests := []struct {
		op, code, desc, value string
	}{
		{"value", "", "", `map[got:hi]`},
		{"coded", sessionsvc.CodeBadRequest, "no such", ""},
		{"plain", sessionsvc.CodeUnavailable, "store down", ""},
		{"panics", sessionsvc.CodeInternal, "internal error", ""},
		{"badvalue", sessionsvc.CodeInternal, "", ""},
		{"deadline", "", "", "true"},
	}
	for _, tt := range tests {
		m := ask(tt.op)
		if code := m.Header.Get(micro.ErrorCodeHeader); code != tt.code {
			t.Errorf("%s: code %q, want %q", tt.op, code, tt.code)
		}
		if desc := m.Header.Get(micro.ErrorHeader); tt.desc != "" && desc != tt.desc {
			t.Errorf("%s: description %q, want %q", tt.op, desc, tt.desc)
		}
		if tt.value == "" {
			continue
		}
		var v any
		if err := msgpack.Unmarshal(m.Data, &v); err != nil {
			t.Fatalf("%s: %v", tt.op, err)
		}
		if got := fmt.Sprint(v); got != tt.value {
			t.Errorf("%s: value %s, want %s", tt.op, got, tt.value)
		}
	}
	if err := g.Stop(nil, nil); err != nil { // stopping: micro still routes, the group refuses
		t.Fatal(err)
	}
	if code := ask("value").Header.Get(micro.ErrorCodeHeader); code != sessionsvc.CodeUnavailable {
		t.Errorf("while stopping: code %q, want %q", code, sessionsvc.CodeUnavailable)
	}
	_ = svc.Stop()
}
