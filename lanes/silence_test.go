package lanes

import (
	"context"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
)

// TestEventsAfterASilence: the events a turn emits after a silence longer
// than probeAfter (a slow tool on a busy machine) are all stored, after the
// emitter has read its fence. (The probe used to start itself again right
// after the fence read, and the watcher then left the events queued for
// good: the run went from its last event before the silence to its final.)
func TestEventsAfterASilence(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	f.startWorker(t, HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		turn.Emit(events.StreamTool, events.EventData{Phase: events.PhaseStart, Name: "slow"})
		select {
		case <-time.After(probeAfter + probeAfter/2):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		turn.Emit(events.StreamTool, events.EventData{Phase: events.PhaseResult, Name: "slow"})
		turn.Emit(events.StreamTool, events.EventData{Phase: events.PhaseStart, Name: "next"})
		turn.Emit(events.StreamTool, events.EventData{Phase: events.PhaseResult, Name: "next"})
		return &Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: "done"}}}}, nil
	}), Config{})
	seq := f.publish(t, "quiet", "go")
	got := shape(t, f.runEvents(t, "quiet", seq))
	want := "lifecycle/start@1 tool/start@1 tool/result@1 tool/start@1 tool/result@1 final@1"
	if got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
}
