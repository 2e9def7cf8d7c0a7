package lanefleet

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes/service"
)

// silentResponder subscribes, on its own connection, to op of session's
// lane service and never answers; each request it gets is signalled on the
// returned channel.
func silentResponder(t *testing.T, url, session, op string) <-chan struct{} {
	t.Helper()
	tok, err := events.KeyToken(session)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 16)
	nc := natstest.Connect(t, url)
	if _, err := nc.Subscribe(service.Subject(tok, op), func(*nats.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestCloseEndsRequestsInFlight: Close on a connection given to New ends a
// request waiting for its reply at once, with nats.ErrConnectionClosed (not
// retried: a retry would subscribe anew after Close), and leaves no
// subscription on the connection.
func TestCloseEndsRequestsInFlight(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	asked := silentResponder(t, srv.URL, "closing", service.OpEvents)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	// Well under callTimeout: a request that waits out its timeout fails
	// the test with the context's error.
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout/2)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.call(ctx, "closing", service.OpEvents, nil, nil) }()
	select {
	case <-asked:
	case <-ctx.Done():
		t.Fatal("the request never reached the responder")
	}
	c.Close()
	if err := <-done; !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("call in flight at Close: %v, want nats.ErrConnectionClosed", err)
	}
	if n := nc.NumSubscriptions(); n != 0 {
		t.Fatalf("%d subscriptions after Close", n)
	}
}
