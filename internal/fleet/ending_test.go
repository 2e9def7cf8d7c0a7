package fleet

import (
	"testing"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// TestOneEndingPerRun: every run of a worker shows exactly one start and
// one terminal lifecycle event (end or error) before its final event,
// whichever part of the worker decided how it ended: the runner (a reply,
// a provider error), the member (a refused message, a chat command's
// reply). The error event says what the result's error reply says; a
// command's end event carries its reply, a model reply's none. (When the
// runner and the member published the ending themselves, a lane that
// published it too showed two.)
func TestOneEndingPerRun(t *testing.T) {
	t.Parallel()
	_, c, ctx := runMember(t, Config{DataDir: t.TempDir(), DefaultModel: "scripted/echo", Env: noEnv})
	for _, tt := range []struct {
		name, text string
		opts       []lanefleet.SendOption
		phase      string
		endText    bool // the end event carries the reply
	}{
		{"a model's reply", "hi", nil, events.PhaseEnd, false},
		{"a provider error", `#script {"replies":[{"error":{"status":400,"message":"the request is malformed"}}]}`,
			[]lanefleet.SendOption{lanefleet.WithModel("scripted/script")}, events.PhaseError, false},
		{"a refused message", "hi", []lanefleet.SendOption{lanefleet.WithTools(events.ClientTool{Name: "read", Parameters: map[string]any{"type": "object"}})},
			events.PhaseError, false},
		{"a chat command", "/help", nil, events.PhaseEnd, true},
	} {
		run, err := c.Send(ctx, "ending", tt.text, tt.opts...)
		if err != nil {
			t.Fatal(err)
		}
		var starts, endings []events.EventData
		var res *events.Result
		for ev, err := range run.Events(ctx) {
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if ev.Terminal() {
				res = ev.Data.Result
				break
			}
			if ev.Stream != events.StreamLifecycle {
				continue
			}
			switch ev.Data.Phase {
			case events.PhaseStart:
				starts = append(starts, ev.Data)
			case events.PhaseEnd, events.PhaseError:
				endings = append(endings, ev.Data)
			}
		}
		if len(starts) != 1 || len(endings) != 1 {
			t.Fatalf("%s: %d start and %d end or error events, want one each: %+v", tt.name, len(starts), len(endings), endings)
		}
		end := endings[0]
		want := events.EventData{Phase: tt.phase, Error: res.ErrorText(), EndedAt: end.EndedAt}
		if tt.phase == events.PhaseError {
			want.Attempt = 1
		}
		if tt.endText {
			want.Text = res.Payloads[0].Text
		}
		if end.Phase != want.Phase || end.Error != want.Error || end.Text != want.Text || end.Attempt != want.Attempt || end.EndedAt == 0 ||
			(res.Meta.Error != nil) != (tt.phase == events.PhaseError) {
			t.Errorf("%s: ending %+v, want %+v (result %+v)", tt.name, end, want, res)
		}
	}
}
