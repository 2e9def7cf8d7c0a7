package authprofile

import (
	"slices"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

func key(id string) Profile {
	return Profile{ID: id, Type: TypeAPIKey, Provider: "anthropic", Key: provider.Secret("sk-" + id)}
}

// TestOrderBase: the base list is the store's order, else the configured
// order, else the configured profiles, else the stored profiles.
func TestOrderBase(t *testing.T) {
	t.Parallel()
	stored := Store{Profiles: []Profile{key("a"), key("b"), {ID: "o", Provider: "openai"}}}
	cases := []struct {
		name     string
		s        Store
		c        Config
		want     []string
		explicit bool
	}{
		{"stored", stored, Config{}, []string{"a", "b"}, false},
		{"configured profiles", stored, Config{Profiles: []ProfileConfig{{ID: "b", Provider: "anthropic"}}}, []string{"b"}, false},
		{"configured order", stored, Config{Order: map[string][]string{"anthropic": {"b", "a"}}}, []string{"b", "a"}, true},
		{"store's order wins", Store{Profiles: stored.Profiles, Order: map[string][]string{"Anthropic": {"a"}}},
			Config{Order: map[string][]string{"anthropic": {"b"}}}, []string{"a"}, true},
		{"no profile", Store{}, Config{}, []string{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := orderBase(tc.s, tc.c, "anthropic")
			if !slices.Equal(b.list, tc.want) || b.explicit != tc.explicit {
				t.Errorf("base %q explicit %v; want %q %v", b.list, b.explicit, tc.want, tc.explicit)
			}
		})
	}
}

// TestOrderValid: invalid, unknown and repeated ids are dropped; a
// configured list the store knows none of falls back to the stored
// profiles.
func TestOrderValid(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	s := Store{Profiles: []Profile{key("a"), {ID: "empty", Type: TypeAPIKey, Provider: "anthropic"}, key("b")}}
	cases := []struct {
		name string
		c    Config
		want []string
	}{
		{"stored, the empty key dropped", Config{}, []string{"a", "b"}},
		{"explicit, repeats and unknown dropped", Config{Order: map[string][]string{"anthropic": {"b", "x", "b", "a"}}}, []string{"b", "a"}},
		{"configured unknown to the store", Config{Profiles: []ProfileConfig{{ID: "x", Provider: "anthropic", Mode: TypeAPIKey}}}, []string{"a", "b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := orderBase(s, tc.c, "anthropic")
			ids, pos := b.valid(s, tc.c, "anthropic", now)
			if !slices.Equal(ids, tc.want) || len(pos) != len(ids) {
				t.Errorf("valid %q at %v; want %q", ids, pos, tc.want)
			}
			for i, id := range ids {
				if s.Profiles[pos[i]].ID != id {
					t.Errorf("%s at %d is %s", id, pos[i], s.Profiles[pos[i]].ID)
				}
			}
		})
	}
}

// TestOrderRank: available profiles by type then least recently used
// (or as given when kept), cooling ones last, soonest expiry first.
func TestOrderRank(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	ms := now.UnixMilli()
	tok := Profile{ID: "t", Type: TypeToken, Provider: "anthropic", Token: provider.Secret("tok")}
	s := Store{Profiles: []Profile{key("a"), key("b"), tok, key("c"), key("d")}, Usage: map[string]State{
		"a": {LastUsed: 20}, "b": {LastUsed: 10},
		"c": {CooldownUntil: ms + 5000}, "d": {CooldownUntil: ms + 1000},
	}}
	ids, pos := []string{"a", "b", "t", "c", "d"}, []int{0, 1, 2, 3, 4}
	cases := []struct {
		name string
		keep bool
		want []string
	}{
		{"round robin", false, []string{"t", "b", "a", "d", "c"}},
		{"explicit order kept", true, []string{"a", "b", "t", "d", "c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := rank(s, Config{}, "", ids, pos, tc.keep, now); !slices.Equal(got, tc.want) {
				t.Errorf("rank %q; want %q", got, tc.want)
			}
		})
	}
}

// TestPreferFirst: the preferred profile goes first when listed.
func TestPreferFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pref string
		want []string
	}{
		{"c", []string{"c", "a", "b"}},
		{"a", []string{"a", "b", "c"}},
		{"x", []string{"a", "b", "c"}},
		{"", []string{"a", "b", "c"}},
	} {
		if got := preferFirst([]string{"a", "b", "c"}, tc.pref); !slices.Equal(got, tc.want) {
			t.Errorf("prefer %q: %q; want %q", tc.pref, got, tc.want)
		}
	}
}
