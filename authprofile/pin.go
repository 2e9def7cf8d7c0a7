package authprofile

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// Pins is the operator's list of the auth profiles a message, or a
// session's stored settings, may pin a run to: profile ids or glob
// patterns in path.Match syntax ("acme:*"). Every sender names its own
// pin, so without a list any sender could run on any key of the fleet
// (another team's billing account, a key kept for one customer) and hold
// it through its cooldowns; the zero value allows none. The profile that
// answered a session's last turn is not a pin: a session always starts
// on it when it is usable, and rotates away from it when it is not.
type Pins struct {
	patterns []string
}

// NewPins returns the list of patterns, deduplicated in order; each must
// be valid path.Match syntax.
func NewPins(patterns ...string) (Pins, error) {
	var p Pins
	for _, pat := range patterns {
		pat = strings.TrimSpace(pat)
		if pat == "" || slices.Contains(p.patterns, pat) {
			continue
		}
		if _, err := path.Match(pat, ""); err != nil {
			return Pins{}, fmt.Errorf("authprofile: pinnable profile %q: %w", pat, err)
		}
		p.patterns = append(p.patterns, pat)
	}
	return p, nil
}

// PinError says why a profile cannot be pinned. Reason is for the sender:
// "auth profile <ID> <Reason>".
type PinError struct {
	ID     string
	Reason string
}

// Error implements error.
func (e *PinError) Error() string { return fmt.Sprintf("auth profile %q %s", e.ID, e.Reason) }

// Check returns a *PinError when id cannot be pinned at now: the list does
// not allow it, s has no such profile, or the profile is disabled
// (billing or authentication failures, State.DisabledUntil). A profile
// cooling down after transient failures can be pinned: the pinned run
// uses it all the same, as the reference does. The list is checked first,
// so a sender learns nothing of the profiles it may not pin.
func (p Pins) Check(s Store, id string, now time.Time) error {
	if !p.allows(id) {
		return &PinError{ID: id, Reason: "may not be pinned on this fleet; pinnable: " + p.describe(12)}
	}
	if _, ok := s.Profile(id); !ok {
		return &PinError{ID: id, Reason: "does not exist on this fleet"}
	}
	if st := s.Usage[id]; st.DisabledUntil > ms(now) {
		why := ""
		if st.DisabledReason != "" {
			why = " (" + string(st.DisabledReason) + ")"
		}
		until := time.UnixMilli(st.DisabledUntil).UTC().Format(time.RFC3339)
		return &PinError{ID: id, Reason: fmt.Sprintf("is disabled%s until %s and cannot be pinned", why, until)}
	}
	return nil
}

// allows reports whether id matches one of the patterns.
func (p Pins) allows(id string) bool {
	for _, pat := range p.patterns {
		if ok, _ := path.Match(pat, id); ok || pat == id {
			return true
		}
	}
	return false
}

// describe lists the patterns for a sender: the first max and how many
// more there are, or "none".
func (p Pins) describe(max int) string {
	switch {
	case len(p.patterns) == 0:
		return "none"
	case len(p.patterns) <= max:
		return strings.Join(p.patterns, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(p.patterns[:max], ", "), len(p.patterns)-max)
}
