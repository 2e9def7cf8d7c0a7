package integration

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// BenchmarkTurnWithSessionSettings measures one session's turns, one after
// the other (Send, then Wait for the final event), on the scripted echo
// model, on one worker: baseline, each message names its model and
// thinking level and the session stores nothing; stored, another session's
// stored run settings give them (and a tool policy). Both sessions' turns
// add to their state. The figure to read is the ratio of ns/op between the
// two (the settings are read once per lane owner with the cursor, the
// state rides on the turn's record): about 1.
func BenchmarkTurnWithSessionSettings(b *testing.B) {
	srv := natstest.Start(b)
	m, err := fleet.Start(b.Context(), fleet.Config{NATSURL: srv.URL, WorkerID: "bench", Scripted: true, DefaultModel: "scripted/script",
		WorkspaceRoot: b.TempDir(), Logger: zerolog.Nop()})
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
	rs := events.RunSettings{Model: "scripted/echo", Thinking: "low", Tools: &events.ToolPolicy{Deny: []string{"exec"}}}
	r, err := c.SetSettings(wctx, "stored", lanefleet.SettingsChange{Run: &rs})
	if err == nil {
		_, err = r.Wait(wctx)
	}
	if err != nil {
		b.Fatal(err)
	}
	turns := func(b *testing.B, session string, opts ...lanefleet.SendOption) {
		for b.Loop() {
			r, err := c.Send(wctx, session, "hello", opts...)
			if err != nil {
				b.Fatal(err)
			}
			if res, err := r.Wait(wctx); err != nil || res.Payloads[0].Text != "echo: hello" {
				b.Fatalf("turn: %+v, %v", res, err)
			}
		}
	}
	b.Run("baseline=message-settings", func(b *testing.B) {
		turns(b, "base", lanefleet.WithModel("scripted/echo"), lanefleet.WithThinking("low"))
	})
	b.Run("stored-settings", func(b *testing.B) { turns(b, "stored") })
}
