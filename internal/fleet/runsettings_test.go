package fleet

import (
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/runner"
)

// TestRunSettingsLimits: a session's stored limits reach the runner, which
// holds them within the worker's.
func TestRunSettingsLimits(t *testing.T) {
	t.Parallel()
	turn := &lanes.Turn{Inbound: &events.Inbound{Text: "hi"},
		Settings: &events.RunSettings{HistoryLimit: 4, MaxToolIterations: 9, MaxToolRepeats: 2}}
	_, s, _ := runSettings(turn)
	if want := (runner.Settings{HistoryLimit: 4, MaxToolIterations: 9, MaxToolRepeats: 2}); s.HistoryLimit != want.HistoryLimit ||
		s.MaxToolIterations != want.MaxToolIterations || s.MaxToolRepeats != want.MaxToolRepeats {
		t.Fatalf("settings %+v, want %+v", s, want)
	}
}
