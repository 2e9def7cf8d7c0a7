package microsvc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/microsvc"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/internal/reply"
)

// TestServeAnswersAndStops: once Serve returns, the server routes the
// endpoint's requests here and the answer goes out through the guard;
// Stop cancels the request in flight with its cause, waits for it and
// unsubscribes (no responders after).
func TestServeAnswersAndStops(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	stopped := errors.New("stopping")
	started, ended := make(chan struct{}), make(chan error, 1)
	svc := microsvc.New(nc, microsvc.Config{Name: "microsvc-test", Version: "0.1.0", Label: "test", Log: zerolog.Nop(), MaxConcurrent: 2})
	h := svc.Guard.Handler("echo", func(req *reply.Request) {
		_ = svc.Calls.Go(func(ctx context.Context) {
			if string(req.Data) == "hold" {
				close(started)
				<-ctx.Done()
				ended <- context.Cause(ctx)
				return
			}
			_ = svc.Guard.Send(req.To, &nats.Msg{Data: req.Data})
		}, nil)
	})
	if err := svc.Serve(microsvc.Endpoint{Name: "echo", Subject: "microsvc.echo", Handler: h}); err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request("microsvc.echo", []byte("hi"), 30*time.Second)
	if err != nil || string(m.Data) != "hi" {
		t.Fatalf("answer %v %v", m, err)
	}
	if err := nc.Publish("microsvc.echo", []byte("hold")); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := svc.Stop(stopped); err != nil {
		t.Fatal(err)
	}
	if err := <-ended; !errors.Is(err, stopped) {
		t.Errorf("the request in flight ended with %v, want the stop's cause", err)
	}
	if _, err := nc.Request("microsvc.echo", []byte("hi"), 30*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("after Stop: %v, want no responders", err)
	}
}

// TestServeAllOrNone: an endpoint that cannot be added fails Serve with
// its What, and the endpoints added before it stop answering.
func TestServeAllOrNone(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	svc := microsvc.New(nc, microsvc.Config{Name: "microsvc-bad", Version: "0.1.0", Label: "test", Log: zerolog.Nop()})
	ok := svc.Guard.Handler("ok", func(req *reply.Request) { _ = svc.Guard.Send(req.To, &nats.Msg{Data: req.Data}) })
	err := svc.Serve(microsvc.Endpoint{Name: "ok", Subject: "microsvc.ok", Handler: ok},
		microsvc.Endpoint{Name: "bad name", Subject: "microsvc.bad", Handler: ok, What: "tool bad name"})
	if err == nil || !strings.HasPrefix(err.Error(), "tool bad name: ") {
		t.Fatalf("Serve: %v, want the bad endpoint's error", err)
	}
	if _, err := nc.Request("microsvc.ok", []byte("hi"), 30*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("after a failed Serve: %v, want no responders", err)
	}
}
