package authprofile

import (
	"slices"
	"time"
)

// Override sources.
const (
	SourceAuto = "auto" // chosen by the runtime; rotated on new sessions and compactions
	SourceUser = "user" // chosen by the user; locks the profile for the session
)

// Override is a session's pinned auth profile (runtime spec §17.6), stored
// on the session entry.
type Override struct {
	ProfileID string `json:"authProfileOverride,omitempty" msgpack:"authProfileOverride,omitempty"`
	// Source is SourceAuto or SourceUser.
	Source string `json:"authProfileOverrideSource,omitempty" msgpack:"authProfileOverrideSource,omitempty"`
	// CompactionCount is the session's compaction count when it was pinned.
	CompactionCount int `json:"authProfileOverrideCompactionCount,omitempty" msgpack:"authProfileOverrideCompactionCount,omitempty"`
}

// Locked reports whether the run must use exactly this profile (a user pin).
func (o Override) Locked() bool { return o.ProfileID != "" && o.Source == SourceUser }

// SessionRequest describes the session a pin is resolved for.
type SessionRequest struct {
	Provider        string
	Model           string // per-model cooldowns are consulted for it; "" = none
	Current         Override
	NewSession      bool
	CompactionCount int // the session's compaction count now
}

// Pin resolves a session's profile pin before a run: an unknown, foreign or
// unordered pin is dropped; a user pin stays until a new session starts.
// Otherwise a new session, or a compaction since pinning, rotates to the next
// available profile after the current one in Order (wrapping); a missing or
// cooling pin is replaced by the first available one; else the pin is kept.
// The result, when not a kept user pin, is an auto pin with the current
// compaction count; its ProfileID is the run's preferred profile (the zero
// Override when no profile is available). Store the result if it differs.
func Pin(s Store, c Config, req SessionRequest, now time.Time) Override {
	order := Order(s, c, OrderRequest{Provider: req.Provider, Model: req.Model}, now)
	cur := req.Current
	if cur.ProfileID != "" {
		p, ok := s.Profile(cur.ProfileID)
		if !ok || NormalizeProvider(p.Provider) != NormalizeProvider(req.Provider) || !slices.Contains(order, cur.ProfileID) {
			cur = Override{}
		}
	}
	if cur.Locked() && !req.NewSession {
		return cur
	}
	available := func(id string) bool {
		p, _ := s.Profile(id)
		return !InCooldown(p.Provider, s.Usage[id], req.Model, now)
	}
	first := func() string {
		for _, id := range order {
			if available(id) {
				return id
			}
		}
		return ""
	}
	next := func() string {
		i := slices.Index(order, cur.ProfileID)
		if i < 0 {
			return first()
		}
		for k := 1; k <= len(order); k++ {
			if id := order[(i+k)%len(order)]; available(id) {
				return id
			}
		}
		return ""
	}
	var pick string
	switch {
	case req.NewSession:
		pick = next()
	case cur.ProfileID != "" && req.CompactionCount > cur.CompactionCount:
		pick = next()
	case cur.ProfileID == "" || !available(cur.ProfileID):
		pick = first()
	default:
		pick = cur.ProfileID
	}
	if pick == "" {
		return Override{}
	}
	return Override{ProfileID: pick, Source: SourceAuto, CompactionCount: req.CompactionCount}
}
