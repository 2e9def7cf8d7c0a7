package fallback_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/fallback"
	"github.com/lanefleet/lanefleet/provider"
)

// A run loop wires the real classifier and the auth-profile state into the
// fallback loop; here every Anthropic profile is rate limited for Opus, so
// the run goes to the next candidate without calling Anthropic.
func Example() {
	now := time.UnixMilli(1_750_000_000_000)
	store := authprofile.Store{
		Profiles: []authprofile.Profile{{ID: "anthropic:work", Type: authprofile.TypeAPIKey, Provider: "anthropic", Key: "sk"}},
		Usage: map[string]authprofile.State{"anthropic:work": {Models: map[string]authprofile.ModelState{
			"claude-opus-4-6": {CooldownUntil: now.Add(20 * time.Minute).UnixMilli(), ErrorCount: 3, FailureCounts: map[provider.Reason]int{"rate_limit": 3}},
		}}},
	}
	auth := authprofile.Config{Fleet: authprofile.FleetDefaults()}
	req := fallback.Request{
		Config:     &fallback.Config{Primary: "anthropic/claude-opus-4-6", Fallbacks: []string{"anthropic/claude-sonnet-4-6", "openai/gpt-5.2"}},
		Provider:   "anthropic",
		Model:      "claude-opus-4-6",
		Classifier: fallback.ProviderClassifier,
		Availability: func(p, m string) fallback.Availability {
			st := authprofile.Status(store, auth, p, m, now)
			return fallback.Availability{Profiles: st.Profiles, AllCooling: st.AllCooling, Reason: st.Reason, SoonestExpiry: st.SoonestExpiry}
		},
	}
	res, err := fallback.Run(context.Background(), req, func() time.Time { return now }, func(_ context.Context, s fallback.Step) error {
		fmt.Println("call", s.Candidate)
		return nil
	})
	fmt.Println(res.Candidate, err)
	for _, a := range res.Attempts {
		fmt.Printf("skipped %s: %s (%s)\n", a.Candidate, a.Error, a.Reason)
	}
	// Output:
	// call anthropic/claude-sonnet-4-6
	// anthropic/claude-sonnet-4-6 <nil>
	// skipped anthropic/claude-opus-4-6: Provider anthropic is in cooldown (all profiles unavailable) (rate_limit)
}
