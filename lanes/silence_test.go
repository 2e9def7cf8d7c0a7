package lanes

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
)

// TestEventsAfterASilence: the events a turn emits after a silence longer
// than fenced.ProbeAfter (a slow tool on a busy machine) are all stored,
// after the emitter has read its fence. (The probe used to start itself
// again right after the fence read, and the watcher then left the events
// queued for good: the run went from its last event before the silence to
// its final.) The silence passes on the worker's clock (Config.Now), not
// the wall clock.
func TestEventsAfterASilence(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	var slept atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(slept.Load())) }
	f.startWorker(t, HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		turn.Emit(events.StreamTool, events.EventData{Phase: events.PhaseStart, Name: "slow"})
		if err := turn.em.AwaitAcks(ctx); err != nil { // the start is answered before the silence
			return nil, err
		}
		slept.Add(int64(fenced.ProbeAfter + fenced.ProbeAfter/2))
		turn.Emit(events.StreamTool, events.EventData{Phase: events.PhaseResult, Name: "slow"})
		turn.Emit(events.StreamTool, events.EventData{Phase: events.PhaseStart, Name: "next"})
		turn.Emit(events.StreamTool, events.EventData{Phase: events.PhaseResult, Name: "next"})
		return &Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: "done"}}}}, nil
	}), Config{Now: clock})
	seq := f.publish(t, "quiet", "go")
	got := shape(t, f.runEvents(t, "quiet", seq))
	want := "lifecycle/start@1 tool/start@1 tool/result@1 tool/start@1 tool/result@1 lifecycle/end@1 final@1"
	if got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
}
