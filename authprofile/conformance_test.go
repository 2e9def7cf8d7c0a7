package authprofile

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/conformance"
	"github.com/lanefleet/lanefleet/provider"
)

type caseInput struct {
	Op            string                          `json:"op"`
	Now           int64                           `json:"now"`
	Provider      string                          `json:"provider"`
	Preferred     *string                         `json:"preferredProfile"`
	Store         json.RawMessage                 `json:"store"`
	Config        *struct{ Auth json.RawMessage } `json:"config"`
	ErrorCount    int                             `json:"errorCount"`
	Reason        provider.Reason                 `json:"reason"`
	ExistingStats json.RawMessage                 `json:"existingStats"`
	UsageStats    map[string]json.RawMessage      `json:"usageStats"`
	ProfileIDs    []string                        `json:"profileIds"`
	Model         string                          `json:"model"`
}

func decodeState(t *testing.T, raw json.RawMessage) State {
	t.Helper()
	var st State
	if len(raw) == 0 || string(raw) == "null" {
		return st
	}
	if err := st.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	return st
}

// statsAfter renders the state after a mark: no entry at all (null) when
// there was none and the mark was a no-op (OpenRouter), else stateView.
func statsAfter(before json.RawMessage, st State, want any) any {
	if (len(before) == 0 || string(before) == "null") && reflect.DeepEqual(st, State{}) {
		return nil
	}
	return stateView(st, want)
}

// stateView renders a state as the cases show a usage entry. The cases write
// "errorCount": 0 where the reference reset the counter; State omits a zero
// count, so a zero the case expects is filled in (absent and 0 mean the same).
// Likewise a time the reference ignores and leaves in place (zero, negative
// or not a number, runtime spec §17.5) is no time at all to State, which
// drops it when it reads the entry: such a value the case expects is filled
// in where State has none.
func stateView(st State, want any) map[string]any {
	data, _ := json.Marshal(st)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	if w, ok := want.(map[string]any); ok {
		if n, ok := w["errorCount"].(json.Number); ok && n.String() == "0" {
			if _, has := m["errorCount"]; !has {
				m["errorCount"] = 0
			}
		}
		for _, k := range []string{"cooldownUntil", "disabledUntil", "lastUsed", "lastFailureAt"} {
			v, expected := w[k]
			if _, has := m[k]; has || !expected || !unusableTime(v) {
				continue
			}
			m[k] = v
		}
	}
	return m
}

// unusableTime reports a time value the reference ignores: a number that is
// not positive, or anything that is not a number.
func unusableTime(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return true
	}
	f, err := n.Float64()
	return err != nil || f <= 0
}

func usageView(usage map[string]State, want any) map[string]any {
	w, _ := want.(map[string]any)
	out := map[string]any{}
	for id, st := range usage {
		out[id] = stateView(st, w[id])
	}
	return out
}

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, "auth-profiles", func(t *testing.T, c conformance.Case) {
		var in caseInput
		conformance.Strict(t, c.Input, &in)
		want, _ := conformance.Decode(t, c.Expected).(map[string]any)
		now := time.UnixMilli(in.Now)
		var cfg Config
		if in.Config != nil {
			var err error
			if cfg, err = DecodeConfig(in.Config.Auth); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]any{}
		switch in.Op {
		case "order":
			s, err := DecodeStore(in.Store)
			if err != nil {
				t.Fatal(err)
			}
			req := OrderRequest{Provider: in.Provider, Model: in.Model}
			if in.Preferred != nil {
				req.Preferred = *in.Preferred
			}
			got["order"] = Order(*s, cfg, req, now)
			if w, ok := want["usageStatsAfter"]; ok {
				after := map[string]State{}
				for id, st := range s.Usage {
					after[id], _ = ClearExpired(st, now)
				}
				got["usageStatsAfter"] = usageView(after, w)
			}
		case "cooldownMs":
			got["ms"] = CooldownFor(in.ErrorCount).Milliseconds()
		case "markFailure":
			st := cfg.Apply(decodeState(t, in.ExistingStats), Event{Kind: EventFailure, Provider: in.Provider, Reason: in.Reason, Model: in.Model}, now)
			got["statsAfter"] = statsAfter(in.ExistingStats, st, want["statsAfter"])
		case "markUsed":
			st := cfg.Apply(decodeState(t, in.ExistingStats), Event{Kind: EventUsed, Provider: in.Provider, Model: in.Model}, now)
			got["statsAfter"] = statsAfter(in.ExistingStats, st, want["statsAfter"])
		case "clearExpired":
			after := map[string]State{}
			mutated := false
			for id, raw := range in.UsageStats {
				var changed bool
				after[id], changed = ClearExpired(decodeState(t, raw), now)
				mutated = mutated || changed
			}
			got["mutated"] = mutated
			got["usageStatsAfter"] = usageView(after, want["usageStatsAfter"])
		case "unavailableReason":
			usage := map[string]State{}
			for id, raw := range in.UsageStats {
				usage[id] = decodeState(t, raw)
			}
			if r := UnavailableReason(usage, in.ProfileIDs, in.Model, now); r != "" {
				got["reason"] = string(r)
			} else {
				got["reason"] = nil
			}
		default:
			t.Fatalf("unknown op %q", in.Op)
		}
		conformance.Check(t, got, want)
	})
}
