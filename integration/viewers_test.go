package integration

import (
	"context"
	"github.com/nats-io/nats.go"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestViewersJoiningMidRun: 100 viewers of one run, joining before, during
// and after it, each see every event exactly once, in order (seq 1..n with no
// gap), ending with the final event.
func TestViewersJoiningMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "viewed", ScriptedDelay: 15 * time.Millisecond})
	nc := natstest.Connect(t, srv.URL)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	run, err := c.Send(ctx, "viewed", strings.Repeat("token ", 60))
	if err != nil {
		t.Fatal(err)
	}
	const viewers = 100
	var wg sync.WaitGroup
	errs := make(chan error, viewers)
	counts := make([]int, viewers)
	for v := range viewers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the joins over about the run's length and beyond.
			time.Sleep(time.Duration(v) * 15 * time.Millisecond)
			// 100 connections at once on a loaded machine: nats.go's 2 s
			// default to get the server's INFO ran out under -race.
			vc, err := lanefleet.Connect(srv.URL, nats.Timeout(30*time.Second))
			if err != nil {
				errs <- err
				return
			}
			defer vc.Close()
			var want uint64 = 1
			var text string
			for ev, err := range vc.Run("viewed", run.ID).Events(ctx) {
				if err != nil {
					errs <- err
					return
				}
				if ev.Seq != want {
					errs <- errorf("viewer %d: event seq %d, want %d", v, ev.Seq, want)
					return
				}
				want++
				switch {
				case ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseRestart:
					// The aborted attempt's text is superseded: under
					// load the worker's lease ran out mid-turn and the
					// run started again.
					text = ""
				case ev.Stream == "assistant":
					text += ev.Data.Delta
				}
				if ev.Terminal() && ev.Data.Result.Payloads[0].Text != strings.TrimSpace(text) {
					errs <- errorf("viewer %d: deltas %q differ from the final text", v, text)
					return
				}
			}
			counts[v] = int(want - 1)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for v, n := range counts {
		if n != counts[0] || n < 3 {
			t.Fatalf("viewer %d saw %d events, viewer 0 saw %d", v, n, counts[0])
		}
	}
	t.Logf("%d viewers each saw all %d events", viewers, counts[0])
}

// TestSteerJoinsTheRunningTurn: a steer-mode message sent while a turn runs
// joins that turn at its next boundary: the model answers it in the same
// run, the transcript shows it inside the turn, and its own run ends
// pointing at the turn that answered it.
func TestSteerJoinsTheRunningTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	// 200 ms a delta: the steer must arrive while the first answer
	// streams (30 words; at 30 ms a delta that window was 900 ms, which a
	// loaded machine's look at the events and one send can outlast).
	startMember(t, srv.URL, fleet.Config{WorkerID: "steered", ScriptedDelay: 200 * time.Millisecond})
	nc := natstest.Connect(t, srv.URL)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	first, err := c.Send(ctx, "steer", strings.Repeat("walk ", 30))
	if err != nil {
		t.Fatal(err)
	}
	// Send the steer once the turn is streaming.
	for ev, err := range first.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == "assistant" {
			break
		}
	}
	steer, err := c.Send(ctx, "steer", "turn left", lanefleet.WithMode("steer"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := first.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every reply of the turn is a payload (as in the reference): the
	// first answer, then the answer to the steered message.
	if n := len(res.Payloads); n != 2 || res.Payloads[n-1].Text != "echo: turn left" {
		t.Fatalf("the turn's replies = %+v, want the first answer then the answer to the steered message", res.Payloads)
	}
	sres, err := steer.Wait(ctx)
	if err != nil || len(sres.Payloads) == 0 || sres.Payloads[len(sres.Payloads)-1].Text != "echo: turn left" {
		t.Fatalf("steer run result = %+v, %v", sres, err)
	}
	hist, _ := c.History(ctx, "steer")
	var roles []string
	for _, e := range hist {
		roles = append(roles, string(e.Message.Role)+":"+strings.Fields(e.Message.Content.Text() + " x")[0])
	}
	if strings.Join(roles, " ") != "user:walk assistant:echo: user:turn assistant:echo:" {
		t.Fatalf("transcript = %v", roles)
	}
}
