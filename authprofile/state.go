package authprofile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

// State is the usage state of one profile (the reference's usageStats entry
// plus the fleet's extensions). Times are Unix milliseconds; 0 = unset. It is
// a plain value: store it as JSON or msgpack under one KV key per profile
// and change it only with Rules.Apply and ClearExpired.
type State struct {
	// LastUsed is when the profile last served a successful run.
	LastUsed int64 `json:"lastUsed,omitempty" msgpack:"lastUsed,omitempty"`
	// CooldownUntil ends a transient cooldown (the ladder).
	CooldownUntil int64 `json:"cooldownUntil,omitempty" msgpack:"cooldownUntil,omitempty"`
	// DisabledUntil ends a billing or permanent-auth disable.
	DisabledUntil int64 `json:"disabledUntil,omitempty" msgpack:"disabledUntil,omitempty"`
	// DisabledReason is why the profile is disabled.
	DisabledReason provider.Reason `json:"disabledReason,omitempty" msgpack:"disabledReason,omitempty"`
	// ErrorCount counts failures inside the failure window.
	ErrorCount int `json:"errorCount,omitempty" msgpack:"errorCount,omitempty"`
	// FailureCounts counts failures per reason inside the failure window.
	FailureCounts map[provider.Reason]int `json:"failureCounts,omitempty" msgpack:"failureCounts,omitempty"`
	// LastFailureAt is when the last failure was recorded.
	LastFailureAt int64 `json:"lastFailureAt,omitempty" msgpack:"lastFailureAt,omitempty"`

	// Models holds per-model cooldowns (Fleet.PerModel), keyed by model id.
	Models map[string]ModelState `json:"models,omitempty" msgpack:"models,omitempty"`
	// LastProbeAt is when a worker last claimed a probe of this profile
	// while it was cooling (Fleet.ProbeMargin).
	LastProbeAt int64 `json:"lastProbeAt,omitempty" msgpack:"lastProbeAt,omitempty"`
	// FailedRun is the run that recorded the last failure
	// (Fleet.KeepFailureInRun).
	FailedRun string `json:"failedRun,omitempty" msgpack:"failedRun,omitempty"`
	// RetryUntil is the latest Retry-After a profile-wide failure asked
	// for (Fleet.RetryAfterFloor); no probe happens before it.
	RetryUntil int64 `json:"retryUntil,omitempty" msgpack:"retryUntil,omitempty"`
}

// ModelState is the cooldown of one (profile, model) pair.
type ModelState struct {
	CooldownUntil int64                   `json:"cooldownUntil,omitempty" msgpack:"cooldownUntil,omitempty"`
	ErrorCount    int                     `json:"errorCount,omitempty" msgpack:"errorCount,omitempty"`
	FailureCounts map[provider.Reason]int `json:"failureCounts,omitempty" msgpack:"failureCounts,omitempty"`
	LastFailureAt int64                   `json:"lastFailureAt,omitempty" msgpack:"lastFailureAt,omitempty"`
	LastProbeAt   int64                   `json:"lastProbeAt,omitempty" msgpack:"lastProbeAt,omitempty"`
	RetryUntil    int64                   `json:"retryUntil,omitempty" msgpack:"retryUntil,omitempty"`
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	s.FailureCounts = maps.Clone(s.FailureCounts)
	if s.Models != nil {
		m := make(map[string]ModelState, len(s.Models))
		for k, v := range s.Models {
			v.FailureCounts = maps.Clone(v.FailureCounts)
			m[k] = v
		}
		s.Models = m
	}
	return s
}

// UnmarshalJSON reads a usage entry leniently, as the reference does: times
// and counts that are not finite numbers are ignored, fractions are floored.
func (s *State) UnmarshalJSON(data []byte) error {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("authprofile: state: %w", err)
	}
	if m == nil {
		*s = State{}
		return nil
	}
	var st State
	st.LastUsed = posNum(m["lastUsed"])
	st.CooldownUntil = posNum(m["cooldownUntil"])
	st.DisabledUntil = posNum(m["disabledUntil"])
	st.LastFailureAt = posNum(m["lastFailureAt"])
	st.LastProbeAt = posNum(m["lastProbeAt"])
	st.RetryUntil = posNum(m["retryUntil"])
	st.ErrorCount = int(posNum(m["errorCount"]))
	if r, ok := m["disabledReason"].(string); ok {
		st.DisabledReason = provider.Reason(r)
	}
	if r, ok := m["failedRun"].(string); ok {
		st.FailedRun = r
	}
	st.FailureCounts = counts(m["failureCounts"])
	if models, ok := m["models"].(map[string]any); ok {
		for id, v := range models {
			mm, ok := v.(map[string]any)
			if !ok {
				continue
			}
			if st.Models == nil {
				st.Models = map[string]ModelState{}
			}
			st.Models[id] = ModelState{
				CooldownUntil: posNum(mm["cooldownUntil"]),
				ErrorCount:    int(posNum(mm["errorCount"])),
				FailureCounts: counts(mm["failureCounts"]),
				LastFailureAt: posNum(mm["lastFailureAt"]),
				LastProbeAt:   posNum(mm["lastProbeAt"]),
				RetryUntil:    posNum(mm["retryUntil"]),
			}
		}
	}
	*s = st
	return nil
}

func posNum(v any) int64 {
	n, ok := num(v)
	if !ok || n < 0 {
		return 0
	}
	return n
}

func counts(v any) map[provider.Reason]int {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var out map[provider.Reason]int
	for k, c := range m {
		n := posNum(c)
		if n <= 0 {
			continue
		}
		if out == nil {
			out = map[provider.Reason]int{}
		}
		out[provider.Reason(k)] = int(min(n, 1<<30))
	}
	return out
}

// unusableUntil is the later of the cooldown and disable windows, 0 if none.
func (s State) unusableUntil() int64 { return max(s.CooldownUntil, s.DisabledUntil, 0) }

// modelUntil is the per-model window for model, 0 if none.
func (s State) modelUntil(model string) int64 {
	if model == "" {
		return 0
	}
	return max(s.Models[model].CooldownUntil, 0)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// ClearExpired removes the windows of s that ended at or before now. When a
// window was removed and none is still active, the error counters are reset
// (errorCount 0, failureCounts dropped; lastFailureAt kept). Per-model
// entries are deleted once their window ended. changed reports whether s changed.
func ClearExpired(s State, now time.Time) (State, bool) {
	t := ms(now)
	out := s.Clone()
	cleared := false
	if out.CooldownUntil > 0 && out.CooldownUntil <= t {
		out.CooldownUntil = 0
		cleared = true
	}
	if out.DisabledUntil > 0 && out.DisabledUntil <= t {
		out.DisabledUntil = 0
		out.DisabledReason = ""
		cleared = true
	}
	if cleared && out.unusableUntil() <= t {
		out.ErrorCount = 0
		out.FailureCounts = nil
	}
	if out.RetryUntil > 0 && out.RetryUntil <= t {
		out.RetryUntil = 0
		cleared = true
	}
	for id, m := range out.Models {
		if m.CooldownUntil > 0 && m.CooldownUntil <= t {
			// An ended per-model window leaves nothing worth keeping.
			delete(out.Models, id)
			cleared = true
		}
	}
	if len(out.Models) == 0 {
		out.Models = nil
	}
	if !cleared {
		return s, false
	}
	return out, true
}
