package lanes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
)

// TestLaneOwnsTheRunsEnding: a run the handler completes ends with exactly
// one terminal lifecycle event, the lane's, made from the handler's
// Outcome: an error result gives one error event saying what its error
// reply says (with the attempt), a reply one end event (carrying the
// Outcome's EndText, "" for a model's reply). A handler that still
// publishes the lane's lifecycle events itself, as the runner once did,
// adds none: the run would otherwise show two starts and two endings. Its
// content (a lifecycle retrying notice among it) goes out as it is.
func TestLaneOwnsTheRunsEnding(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	failed := &events.Result{Payloads: []events.Payload{{Text: "The model is unavailable.", IsError: true}},
		Meta: events.Meta{Error: &events.RunError{Kind: "provider_error", Message: "acme: HTTP 503"}}}
	h := HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		turn.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseStart})
		turn.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseRetrying, DelayMs: 1})
		switch turn.Inbound.Text {
		case "fail":
			turn.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseError, Error: failed.ErrorText(), EndedAt: 1})
			return &Outcome{Result: failed}, nil
		case "note":
			turn.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseEnd, Text: "a note", EndedAt: 1})
			return &Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: "a note"}}}, EndText: "a note"}, nil
		}
		turn.Emit(events.StreamAssistant, events.EventData{Delta: "hello", Text: "hello"})
		turn.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseEnd, EndedAt: 1})
		return &Outcome{Result: &events.Result{Payloads: []events.Payload{{Text: "hello"}}}}, nil
	})
	f.startWorker(t, h, Config{})
	for _, tt := range []struct {
		text, shape string
		ending      events.EventData
	}{
		{"fail", "lifecycle/start@1 lifecycle/retrying@1 lifecycle/error@1 final@1",
			events.EventData{Phase: events.PhaseError, Error: "The model is unavailable.", Attempt: 1}},
		{"note", "lifecycle/start@1 lifecycle/retrying@1 lifecycle/end@1 final@1",
			events.EventData{Phase: events.PhaseEnd, Text: "a note"}},
		{"hi", "lifecycle/start@1 lifecycle/retrying@1 assistant@1 lifecycle/end@1 final@1",
			events.EventData{Phase: events.PhaseEnd}},
	} {
		key := "ending-" + tt.text
		seq := f.publish(t, key, tt.text)
		f.waitFinal(t, key, seq)
		evs := f.runEvents(t, key, seq)
		if got := shape(t, evs); got != tt.shape {
			t.Fatalf("%s: events\n got %s\nwant %s", tt.text, got, tt.shape)
		}
		end := evs[len(evs)-2].Data
		if end.EndedAt == 0 || end.EndedAt == 1 {
			t.Errorf("%s: the ending's time %d is not the lane's", tt.text, end.EndedAt)
		}
		end.EndedAt = 0
		if fmt.Sprint(end) != fmt.Sprint(tt.ending) {
			t.Errorf("%s: ending %+v, want %+v", tt.text, end, tt.ending)
		}
	}
}
