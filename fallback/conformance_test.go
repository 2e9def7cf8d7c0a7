package fallback

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/internal/conformance"
	"github.com/lanefleet/lanefleet/provider"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, "model-fallback", func(t *testing.T, c conformance.Case) {
		var in struct {
			Now    int64 `json:"now"`
			Config *struct {
				Agents struct {
					Defaults struct {
						Model struct {
							Primary   string   `json:"primary"`
							Fallbacks []string `json:"fallbacks"`
						} `json:"model"`
						Models map[string]struct {
							Alias string `json:"alias"`
						} `json:"models"`
					} `json:"defaults"`
				} `json:"agents"`
				Auth json.RawMessage `json:"auth"`
			} `json:"config"`
			Requested string                          `json:"requested"`
			Override  []string                        `json:"fallbacksOverride"`
			AuthStore json.RawMessage                 `json:"authStore"`
			Outcomes  map[string]*conformance.JSError `json:"outcomes"`
		}
		conformance.Strict(t, c.Input, &in)
		now := time.UnixMilli(in.Now)
		prov, model, _ := strings.Cut(in.Requested, "/")
		// The production classifier sees the Go error the fleet would get
		// in place of each case error.
		r := Request{Provider: prov, Model: model, Override: in.Override, Classifier: ProviderClassifier}
		if in.Config != nil {
			cfg := &Config{Primary: in.Config.Agents.Defaults.Model.Primary, Fallbacks: in.Config.Agents.Defaults.Model.Fallbacks}
			for ref, m := range in.Config.Agents.Defaults.Models {
				if m.Alias != "" {
					if cfg.Aliases == nil {
						cfg.Aliases = map[string]string{}
					}
					cfg.Aliases[m.Alias] = ref
				}
			}
			r.Config = cfg
			store := &authprofile.Store{}
			if len(in.AuthStore) > 0 && string(in.AuthStore) != "null" {
				var err error
				if store, err = authprofile.DecodeStore(in.AuthStore); err != nil {
					t.Fatal(err)
				}
			}
			acfg, err := authprofile.DecodeConfig(in.Config.Auth)
			if err != nil {
				t.Fatal(err)
			}
			r.Availability = func(p, m string) Availability {
				st := authprofile.Status(*store, acfg, p, "", now)
				return Availability{Profiles: st.Profiles, AllCooling: st.AllCooling, Reason: st.Reason, SoonestExpiry: st.SoonestExpiry}
			}
		}
		var tried []string
		res, err := Run(context.Background(), r, func() time.Time { return now }, func(_ context.Context, s Step) error {
			tried = append(tried, s.Candidate.String())
			if e, ok := in.Outcomes[s.Candidate.String()]; ok {
				return e.Err()
			}
			if e, ok := in.Outcomes["*"]; ok {
				return e.Err()
			}
			return nil
		})
		got := map[string]any{"tried": tried, "result": nil, "thrown": nil}
		if tried == nil {
			got["tried"] = []string{}
		}
		if err == nil {
			attempts := []any{}
			for _, a := range res.Attempts {
				var status any
				if a.Status != 0 {
					status = a.Status
				}
				attempts = append(attempts, map[string]any{"candidate": a.Candidate.String(), "reason": string(a.Reason), "status": status, "error": a.Error})
			}
			got["result"] = map[string]any{"provider": res.Candidate.Provider, "model": res.Candidate.Model, "attempts": attempts}
		} else {
			got["thrown"] = thrown(err)
		}
		conformance.Check(t, got, conformance.Decode(t, c.Expected))
	})
}

// thrown describes a returned error the way the cases describe a thrown one.
func thrown(err error) map[string]any {
	var ex *ExhaustedError
	var pe *provider.Error
	switch {
	case errors.As(err, &ex):
		return map[string]any{"name": "Error", "message": ex.Error(), "reason": nil}
	case errors.As(err, &pe):
		return map[string]any{"name": "FailoverError", "message": pe.Message, "reason": string(pe.Reason)}
	}
	if je, ok := conformance.JSErrorOf(err); ok {
		return map[string]any{"name": cmp.Or(je.Name, "Error"), "message": je.Message, "reason": nil}
	}
	return map[string]any{"name": "Error", "message": err.Error(), "reason": nil}
}
