package authprofile

import (
	"errors"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

func TestPins(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_750_000_000_000)
	store := Store{
		Profiles: []Profile{{ID: "acme:a", Provider: "acme"}, {ID: "acme:b", Provider: "acme"}, {ID: "acme:c", Provider: "acme"}, {ID: "other:x", Provider: "other"}},
		Usage: map[string]State{
			"acme:b": {DisabledUntil: now.Add(time.Hour).UnixMilli(), DisabledReason: provider.ReasonBilling},
			"acme:c": {CooldownUntil: now.Add(time.Minute).UnixMilli()},
			// A disable that has run out no longer counts.
			"acme:a": {DisabledUntil: now.Add(-time.Second).UnixMilli(), DisabledReason: provider.ReasonAuthPermanent},
		},
	}
	for _, tc := range []struct {
		name     string
		patterns []string
		id       string
		want     string // the PinError's Reason; "" = may be pinned
	}{
		{"none by default", nil, "acme:a", "may not be pinned on this fleet; pinnable: none"},
		{"an id", []string{"acme:a"}, "acme:a", ""},
		{"a pattern", []string{"acme:*"}, "acme:a", ""},
		{"not listed", []string{"acme:a", "acme:c"}, "other:x", "may not be pinned on this fleet; pinnable: acme:a, acme:c"},
		// The list comes first: a sender learns nothing of other profiles.
		{"unknown and not listed", []string{"acme:*"}, "nosuch:1", "may not be pinned on this fleet; pinnable: acme:*"},
		{"listed but unknown", []string{"acme:*"}, "acme:zz", "does not exist on this fleet"},
		{"disabled", []string{"*"}, "acme:b", "is disabled (billing) until 2025-06-15T16:06:40Z and cannot be pinned"},
		// As in the reference, a pinned profile is used while it cools.
		{"cooling", []string{"*"}, "acme:c", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPins(tc.patterns...)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Check(store, tc.id, now)
			pe, ok := errors.AsType[*PinError](err)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check(%q) = %v, want nil", tc.id, err)
			case tc.want != "" && (!ok || pe.Reason != tc.want || pe.ID != tc.id):
				t.Fatalf("Check(%q) = %v, want a PinError %q", tc.id, err, tc.want)
			}
		})
	}
	if _, err := NewPins("acme:["); err == nil {
		t.Fatal("a bad pattern is accepted")
	}
	if p, _ := NewPins("a", " a ", "", "b"); p.describe(1) != "a and 1 more" {
		t.Fatalf("describe = %q", p.describe(1))
	}
}
