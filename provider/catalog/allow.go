package catalog

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Allowlist is the operator's list of the models a message may ask for:
// "provider/model-id" references or glob patterns in path.Match syntax
// ("anthropic/*", "openai/gpt-5*"). A sender names a model in every
// message, so without a list any sender could pick any model the fleet's
// keys reach (or a test model); a reference the list does not allow is
// refused, never answered by another model.
type Allowlist struct {
	patterns []string
}

// NewAllowlist returns the list of patterns, deduplicated in order. A
// pattern must hold a "/" (provider/model) and be valid path.Match syntax.
func NewAllowlist(patterns ...string) (Allowlist, error) {
	var a Allowlist
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if p == "" || slices.Contains(a.patterns, p) {
			continue
		}
		if !strings.Contains(p, "/") {
			return Allowlist{}, fmt.Errorf("catalog: allowed model %q: want provider/model-id or a pattern such as provider/*", p)
		}
		if _, err := path.Match(p, ""); err != nil {
			return Allowlist{}, fmt.Errorf("catalog: allowed model %q: %w", p, err)
		}
		a.patterns = append(a.patterns, p)
	}
	return a, nil
}

// Allows reports whether ref matches one of the patterns. The "*" of a
// pattern does not cross a "/", as in path.Match: "openrouter/*" allows
// "openrouter/auto" but not "openrouter/anthropic/claude"; write
// "openrouter/*/*" for those.
func (a Allowlist) Allows(ref string) bool {
	for _, p := range a.patterns {
		if p == ref {
			return true
		}
		if ok, _ := path.Match(p, ref); ok {
			return true
		}
	}
	return false
}

// Patterns returns the patterns, in order.
func (a Allowlist) Patterns() []string { return slices.Clone(a.patterns) }

// Describe lists the allowed models for a message to a sender: the first
// max patterns and how many more there are.
func (a Allowlist) Describe(max int) string {
	if len(a.patterns) == 0 {
		return "none"
	}
	if max <= 0 || len(a.patterns) <= max {
		return strings.Join(a.patterns, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(a.patterns[:max], ", "), len(a.patterns)-max)
}
