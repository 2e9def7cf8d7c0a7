package runner

import (
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider"
)

// TestSettingsModelAndFallbacks: a run's Settings.Model (its agent's) is
// the model a message naming none runs on and the chain's primary, and
// Settings.Fallbacks replace the worker's chain; without them the worker's
// apply.
func TestSettingsModelAndFallbacks(t *testing.T) {
	t.Parallel()
	var models []string
	acme := &keyed{fn: func(req *provider.Request) (string, error) {
		models = append(models, req.Model.ID)
		return "", &provider.Error{Reason: provider.ReasonOverloaded, Status: 529, Message: "overloaded_error: Overloaded"}
	}}
	other := &keyed{fn: func(*provider.Request) (string, error) { return "from the agent's fallback", nil }}
	r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: acme, other: other}, Retry: RetryPolicy{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(s Settings) *Output {
		t.Helper()
		out, err := r.Run(t.Context(), Input{RunID: "run", SessionID: "sid", Inbound: &events.Inbound{Text: "hi"}, Settings: s}, &sink{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := run(Settings{Model: "acme/m2", Fallbacks: []string{"other/m9"}})
	if out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "from the agent's fallback" || len(models) != 1 || models[0] != "m2" {
		t.Fatalf("with the agent's model and fallbacks: %+v; acme was asked for %v", out.Result, models)
	}
	models = nil
	out = run(Settings{})
	if out.Result.Meta.Error == nil || len(models) != 1 || models[0] != "m1" {
		t.Fatalf("with the worker's: %+v; acme was asked for %v", out.Result, models)
	}
}
