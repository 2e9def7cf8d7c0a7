package inflight_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/lanefleet/lanefleet/internal/inflight"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestStopMicro: once StopMicro's stop returns, the server routes no
// request to the service (no responders); a closed connection is no
// error.
func TestStopMicro(t *testing.T) {
	srv := natstest.Start(t)
	for _, tc := range []struct {
		name  string
		close bool
	}{
		{"open", false},
		{"closed connection", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := natstest.Connect(t, srv.URL)
			svc, err := micro.AddService(nc, micro.Config{Name: "stop-test", Version: "0.1.0"})
			if err != nil {
				t.Fatal(err)
			}
			if err := svc.AddEndpoint("echo", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(r.Data()) }),
				micro.WithEndpointSubject("stop.test")); err != nil {
				t.Fatal(err)
			}
			if _, err := nc.Request("stop.test", []byte("hi"), 30*time.Second); err != nil {
				t.Fatalf("before stop: %v", err)
			}
			if tc.close {
				nc.Close()
			}
			if err := inflight.StopMicro(svc, nc)(); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if !svc.Stopped() {
				t.Fatal("the service was not stopped")
			}
			if tc.close {
				return
			}
			if _, err := nc.Request("stop.test", []byte("hi"), 30*time.Second); !errors.Is(err, nats.ErrNoResponders) {
				t.Fatalf("after stop: %v, want no responders", err)
			}
		})
	}
}
