package authprofile_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/provider"
)

// A run loop picks a profile, records the outcome with Apply and stores
// each profile's State under its own key (a map stands in for the KV
// bucket; a real store retries Apply on a fresh value when its
// compare-and-swap fails).
func Example() {
	now := time.UnixMilli(1_750_000_000_000)
	cfg := authprofile.Config{Fleet: authprofile.FleetDefaults()}
	store := authprofile.Store{Profiles: []authprofile.Profile{
		{ID: "anthropic:work", Type: authprofile.TypeAPIKey, Provider: "anthropic", Key: "sk-1"},
		{ID: "anthropic:home", Type: authprofile.TypeAPIKey, Provider: "anthropic", Key: "sk-2"},
	}}
	kv := map[string][]byte{}
	load := func() {
		store.Usage = map[string]authprofile.State{}
		for id, data := range kv {
			var st authprofile.State
			_ = json.Unmarshal(data, &st)
			store.Usage[id] = st
		}
	}
	record := func(id string, ev authprofile.Event, at time.Time) {
		load()
		data, _ := json.Marshal(cfg.Apply(store.Usage[id], ev, at))
		kv[id] = data
	}

	load()
	ids := authprofile.Order(store, cfg, authprofile.OrderRequest{Provider: "anthropic", Model: "claude-opus-4-6"}, now)
	sel := authprofile.Select(store, cfg, ids, "claude-opus-4-6", now)
	fmt.Println("first:", sel.ID)

	// The provider answered 429 with Retry-After: 90s.
	record(sel.ID, authprofile.Event{Kind: authprofile.EventFailure, Provider: "anthropic",
		Reason: provider.ReasonRateLimit, Model: "claude-opus-4-6", RetryAfter: 90 * time.Second, RunID: "run-1"}, now)
	fmt.Println("stored:", string(kv[sel.ID]))

	load()
	ids = authprofile.Order(store, cfg, authprofile.OrderRequest{Provider: "anthropic", Model: "claude-opus-4-6"}, now)
	fmt.Println("opus:", authprofile.Select(store, cfg, ids, "claude-opus-4-6", now).ID)
	ids = authprofile.Order(store, cfg, authprofile.OrderRequest{Provider: "anthropic", Model: "claude-haiku-4-5"}, now)
	fmt.Println("haiku:", authprofile.Select(store, cfg, ids, "claude-haiku-4-5", now).ID)
	// Output:
	// first: anthropic:work
	// stored: {"models":{"claude-opus-4-6":{"cooldownUntil":1750000090000,"errorCount":1,"failureCounts":{"rate_limit":1},"lastFailureAt":1750000000000,"retryUntil":1750000090000}},"failedRun":"run-1"}
	// opus: anthropic:home
	// haiku: anthropic:work
}
