package catalog

import "testing"

func TestAllowlist(t *testing.T) {
	a, err := NewAllowlist("anthropic/claude-sonnet-4-6", "openai/gpt-5*", "openrouter/*/*", " ", "openai/gpt-5*")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref  string
		want bool
	}{
		{"anthropic/claude-sonnet-4-6", true},   // exact
		{"anthropic/claude-opus-4", false},      // same provider, not listed
		{"openai/gpt-5-mini", true},             // glob
		{"openai/gpt-4o", false},                // glob does not match
		{"openrouter/anthropic/claude-x", true}, // two segments
		{"openrouter/auto", false},              // "*/*" needs two
		{"scripted/script", false},              // a test model is never implied
		{"", false},
	} {
		if got := a.Allows(tc.ref); got != tc.want {
			t.Errorf("Allows(%q) = %v, want %v", tc.ref, got, tc.want)
		}
	}
	if got := len(a.Patterns()); got != 3 {
		t.Errorf("patterns = %v, want 3 deduplicated", a.Patterns())
	}
	if got, want := a.Describe(2), "anthropic/claude-sonnet-4-6, openai/gpt-5* and 1 more"; got != want {
		t.Errorf("Describe(2) = %q, want %q", got, want)
	}
}

func TestAllowlistRejectsBadPatterns(t *testing.T) {
	for _, p := range []string{"claude", "openai/[", "*"} {
		if _, err := NewAllowlist(p); err == nil {
			t.Errorf("NewAllowlist(%q) accepted", p)
		}
	}
	var none Allowlist
	if none.Allows("scripted/echo") || none.Describe(3) != "none" {
		t.Error("the empty list allows nothing")
	}
}
