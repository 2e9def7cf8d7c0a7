package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// BenchmarkChatCommand measures one session's turns, one after the other
// (Send, then Wait for the final event), on one worker: baseline, an
// ordinary message on the instant scripted echo model; status, /status;
// think, /think high (a settings change, stored fenced). A command makes no
// model call: its cost is the lane's own turn overhead (a start event, the
// record, the final event). The figures to read are the differences in
// ns/op from the baseline, which must stay within 5 ms (in practice a
// command is cheaper than the model turn).
func BenchmarkChatCommand(b *testing.B) {
	srv := natstest.Start(b)
	m, err := fleet.Start(b.Context(), fleet.Config{NATSURL: srv.URL, WorkerID: "bench", Scripted: true, DefaultModel: "scripted/echo",
		NoBuiltinTools: true, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	c, _ := lanefleet.New(natstest.Connect(b, srv.URL))
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
	defer wcancel()
	turns := func(b *testing.B, session, text, want string) {
		for b.Loop() {
			r, err := c.Send(wctx, session, text)
			if err != nil {
				b.Fatal(err)
			}
			if res, err := r.Wait(wctx); err != nil || !strings.HasPrefix(res.Payloads[0].Text, want) {
				b.Fatalf("turn: %+v, %v", res, err)
			}
		}
	}
	b.Run("baseline=model-turn", func(b *testing.B) { turns(b, "base", "hello", "echo: hello") })
	b.Run("status", func(b *testing.B) { turns(b, "status", "/status", "Model: scripted/echo") })
	b.Run("think", func(b *testing.B) { turns(b, "think", "/think high", "Thinking level set to high.") })
}
