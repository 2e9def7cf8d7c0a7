package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestRateLimitWaitingNotice: three workers share a limit of two model
// calls a minute (worker --rate-limit 'scripted/*=rpm:2'). Two sessions'
// turns run; the third session's call waits for the window instead of
// being made, and its sender reads why and for how long in a waiting
// lifecycle event on the run. (Before, every call was made at once.)
func TestRateLimitWaitingNotice(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	rule, err := governance.ParseRateRule("scripted/*=rpm:2")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		startMember(t, srv.URL, fleet.Config{WorkerID: id, DefaultModel: "scripted/echo", NoBuiltinTools: true, RateLimits: []governance.RateRule{rule},
			ShutdownGrace: 100 * time.Millisecond}) // the waiting turn is cancelled at the end
	}
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i := 1; i <= 2; i++ {
		r, err := c.Send(ctx, fmt.Sprintf("acme:%d", i), "hi")
		if err != nil {
			t.Fatal(err)
		}
		if res, err := r.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: hi" {
			t.Fatalf("turn %d within the limit: %+v, %v", i, res, err)
		}
	}
	r, err := c.Send(ctx, "acme:3", "hi")
	if err != nil {
		t.Fatal(err)
	}
	for e, err := range r.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Stream == events.StreamFinal {
			t.Fatalf("the third call ran: %+v", e)
		}
		if e.Stream != events.StreamLifecycle || e.Data.Phase != events.PhaseWaiting {
			continue
		}
		want := "Rate limit: the fleet shares scripted/* (rpm:2), and this model call would pass its requests a minute (2 used, 0 held by calls in flight, this call may take 1); it waits about "
		if !strings.HasPrefix(e.Data.Text, want) || e.Data.DelayMs <= 0 || e.Data.DelayMs > 62_000 {
			t.Fatalf("waiting event %q (delay %d ms); want it to start %q with the wait", e.Data.Text, e.Data.DelayMs, want)
		}
		return
	}
	t.Fatal("the run's events ended without a waiting event")
}
