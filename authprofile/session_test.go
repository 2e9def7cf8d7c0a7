package authprofile

import (
	"testing"
	"time"
)

func TestPin(t *testing.T) {
	t.Parallel()
	store := Store{
		Profiles: []Profile{
			{ID: "a", Type: TypeAPIKey, Provider: "anthropic", Key: "k"},
			{ID: "b", Type: TypeAPIKey, Provider: "anthropic", Key: "k"},
			{ID: "c", Type: TypeAPIKey, Provider: "anthropic", Key: "k"},
			{ID: "o", Type: TypeAPIKey, Provider: "openai", Key: "k"},
		},
		Order: map[string][]string{"anthropic": {"a", "b", "c"}},
		Usage: map[string]State{"b": {CooldownUntil: at(time.Hour)}},
	}
	auto := func(id string, n int) Override {
		return Override{ProfileID: id, Source: SourceAuto, CompactionCount: n}
	}
	user := func(id string) Override { return Override{ProfileID: id, Source: SourceUser} }
	tests := []struct {
		name string
		req  SessionRequest
		want Override
	}{
		// No pin yet: the first available profile, pinned as auto.
		{"first pin", SessionRequest{}, auto("a", 0)},
		// A healthy auto pin is kept.
		{"keep", SessionRequest{Current: auto("c", 2), CompactionCount: 2}, auto("c", 2)},
		// A compaction since pinning rotates, skipping the cooling b and wrapping.
		{"compaction rotates", SessionRequest{Current: auto("a", 1), CompactionCount: 2}, auto("c", 2)},
		{"rotation wraps", SessionRequest{Current: auto("c", 0), CompactionCount: 1}, auto("a", 1)},
		// A new session rotates too, even a user pin.
		{"new session rotates user pin", SessionRequest{Current: user("a"), NewSession: true}, auto("c", 0)},
		// A user pin survives otherwise, even while cooling.
		{"user pin kept", SessionRequest{Current: user("b"), CompactionCount: 5}, user("b")},
		// A cooling auto pin moves to the first available.
		{"cooling auto pin replaced", SessionRequest{Current: auto("b", 0)}, auto("a", 0)},
		// A pin for another provider's profile is dropped.
		{"foreign pin dropped", SessionRequest{Current: user("o")}, auto("a", 0)},
		// An unknown profile is dropped.
		{"unknown pin dropped", SessionRequest{Current: auto("zz", 0)}, auto("a", 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.req.Provider = "anthropic"
			if got := Pin(store, Config{}, tt.req, t0); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	// No available profile at all: no pin.
	cold := store
	cold.Usage = map[string]State{"a": {CooldownUntil: at(time.Hour)}, "b": {CooldownUntil: at(time.Hour)}, "c": {CooldownUntil: at(time.Hour)}}
	if got := Pin(cold, Config{}, SessionRequest{Provider: "anthropic"}, t0); got != (Override{}) {
		t.Errorf("got %+v", got)
	}
}
