package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// BenchmarkRoundTrip compares a remote tool call with a raw nc.Request of
// the same bodies between the same two connections, the floor any remote
// call stands on.
func BenchmarkRoundTrip(b *testing.B) {
	srv := natstest.Start(b)
	server, client := natstest.Connect(b, srv.URL), natstest.Connect(b, srv.URL)

	tool := newTool("echo", func(_ context.Context, c tools.Call) (tools.Result, error) {
		q, _ := c.Args["q"].(string)
		return tools.TextResult("echo " + q), nil
	})
	svc, err := remote.Serve(server, remote.ServiceConfig{}, tool)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Stop() })
	list, err := remote.Discover(b.Context(), client, remote.DiscoverConfig{Window: 100 * time.Millisecond})
	if err != nil || len(list) != 1 {
		b.Fatalf("Discover = %v, %v", list, err)
	}
	echo := list[0]
	call := tools.Call{ID: "call_1", Name: "echo", Args: map[string]any{"q": "hello"}}

	reqBody := []byte(`{"id":"call_1","name":"echo","args":{"q":"hello"}}`)
	repBody := []byte(`{"content":[{"text":"echo hello","type":"text"}],"isError":false}`)
	sub, err := server.Subscribe("bench.raw", func(m *nats.Msg) { _ = m.Respond(repBody) })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := server.Flush(); err != nil {
		b.Fatal(err)
	}

	b.Run("raw_request", func(b *testing.B) {
		for b.Loop() {
			if _, err := client.Request("bench.raw", reqBody, 5*time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remote_call", func(b *testing.B) {
		for b.Loop() {
			if _, err := echo.Call(b.Context(), call); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remote_call_updates", func(b *testing.B) {
		c := call
		c.Update = func(tools.Result) {}
		for b.Loop() {
			if _, err := echo.Call(b.Context(), c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw_request_parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := client.Request("bench.raw", reqBody, 5*time.Second); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("remote_call_parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := echo.Call(b.Context(), call); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
