package fleet

import (
	"errors"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// TestModelsItRuns: a message or a session's settings naming a model this
// worker would not run (not allowed, or its provider has no key here) is
// refused with invalid_input, listing only the models it runs; a settings
// message is refused at store time and stores nothing. (A keyless model
// of the catalog was allowed and failed every turn with an auth error,
// the refusal listed models without a key, and `settings --model` stored
// any model, failing every later turn of the session.)
func TestModelsItRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		allow []string
		want  string // the refusal of anthropic/claude-sonnet-4-6
	}{
		{"default list", nil, `model "anthropic/claude-sonnet-4-6" is not allowed on this fleet; allowed: scripted/echo, scripted/*`},
		{"allowed without a key", []string{"anthropic/*", "scripted/*"},
			`model "anthropic/claude-sonnet-4-6" cannot run on this fleet: no API key for provider "anthropic" (set ANTHROPIC_API_KEY or ANTHROPIC_OAUTH_TOKEN, or add an auth profile for anthropic to --auth-profiles); it runs: scripted/*`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c, ctx := runMember(t, Config{DataDir: t.TempDir(), DefaultModel: "scripted/echo", AllowModels: tc.allow, Env: noEnv})
			const model = "anthropic/claude-sonnet-4-6"
			run, err := c.Send(ctx, "m-"+tc.name, "hi", lanefleet.WithModel(model))
			if err != nil {
				t.Fatal(err)
			}
			_, err = run.Wait(ctx)
			var re *lanefleet.RunError
			if !errors.As(err, &re) || re.Kind != "invalid_input" || re.Message != tc.want {
				t.Fatalf("message naming %s: %v\nwant invalid_input: %s", model, err, tc.want)
			}

			// The same model as the session's setting: refused when stored.
			run, err = c.SetSettings(ctx, "m-"+tc.name, lanefleet.SettingsChange{Run: &events.RunSettings{Model: model, Thinking: "low"}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = run.Wait(ctx)
			if !errors.As(err, &re) || re.Kind != "invalid_input" || !strings.HasPrefix(re.Message, `model "`+model+`"`) {
				t.Fatalf("settings --model %s: %v; want invalid_input", model, err)
			}
			s, err := c.Settings(ctx, "m-"+tc.name)
			if err != nil || s.Run != nil {
				t.Fatalf("after the refused settings: %+v, %v; want nothing stored", s.Run, err)
			}
			// A model it runs is stored.
			run, err = c.SetSettings(ctx, "m-"+tc.name, lanefleet.SettingsChange{Run: &events.RunSettings{Model: "scripted/echo"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := run.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if s, err := c.Settings(ctx, "m-"+tc.name); err != nil || s.Run == nil || s.Run.Model != "scripted/echo" {
				t.Fatalf("stored: %+v, %v", s.Run, err)
			}
		})
	}
}

// TestClientToolTakesNoWorkerName: a client tool named like a worker tool
// is refused with invalid_input naming both (its calls went to the client,
// silently replacing the worker's tool); another name runs.
func TestClientToolTakesNoWorkerName(t *testing.T) {
	t.Parallel()
	_, c, ctx := runMember(t, Config{DataDir: t.TempDir(), DefaultModel: "scripted/echo", Env: noEnv})
	params := map[string]any{"type": "object"}
	for _, name := range []string{"read", "Exec"} {
		run, err := c.Send(ctx, "tools", "hi", lanefleet.WithTools(events.ClientTool{Name: name, Parameters: params}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = run.Wait(ctx)
		var re *lanefleet.RunError
		want := `client tool "` + name + `" has the name of a worker tool (read, write, edit, apply_patch, exec, web_fetch, web_search, process, memory_search, memory_get, sessions_list, sessions_history, sessions_send): rename it`
		if !errors.As(err, &re) || re.Kind != "invalid_input" || re.Message != want {
			t.Fatalf("client tool %s: %v; want invalid_input %q", name, err, want)
		}
	}
	run, err := c.Send(ctx, "tools", "hi", lanefleet.WithTools(events.ClientTool{Name: "weather", Parameters: params}))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := run.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: hi" {
		t.Fatalf("client tool weather: %+v, %v", res, err)
	}
}
