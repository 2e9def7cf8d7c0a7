package fallback

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/internal/conformance"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
)

// jsError is an error as the cases describe one: a JavaScript error object
// with a class name, message, HTTP status and system code, or a
// FailoverError with a reason.
type jsError struct {
	Name     string          `json:"name"`
	Message  string          `json:"message"`
	Status   int             `json:"status"`
	Code     string          `json:"code"`
	Failover provider.Reason `json:"failover"`
}

func (e *jsError) Error() string { return e.Message }

func (e *jsError) failure() failover.Failure {
	f := failover.Failure{Name: e.Name, Message: e.Message, Status: e.Status, Code: e.Code}
	if e.Failover != "" {
		f.Name, f.Reason = "FailoverError", e.Failover
	}
	return f
}

// classify wires the real classifier (provider/failover) into the loop: the
// reference's coerceToFailoverError, its fallback abort test and its
// likely-context-overflow test.
func classify(err error) Classification {
	var je *jsError
	if !errors.As(err, &je) {
		je = &jsError{Name: "Error", Message: err.Error()}
	}
	f := je.failure()
	c := Classification{Message: je.Message}
	if je.Name == "AbortError" && je.Failover == "" && !failover.IsTimeoutFailure(f) {
		c.Abort = true
	}
	c.ContextOverflow = failover.IsLikelyContextOverflow(je.Message)
	c.Reason = failover.ReasonOfFailure(f)
	if c.Reason != "" {
		c.Status = je.Status
		if c.Status == 0 {
			c.Status = failover.StatusOf(c.Reason)
		}
	}
	return c
}

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
			Requested string              `json:"requested"`
			Override  []string            `json:"fallbacksOverride"`
			AuthStore json.RawMessage     `json:"authStore"`
			Outcomes  map[string]*jsError `json:"outcomes"`
		}
		if err := json.Unmarshal(c.Input, &in); err != nil {
			t.Fatal(err)
		}
		now := time.UnixMilli(in.Now)
		prov, model, _ := strings.Cut(in.Requested, "/")
		r := Request{Provider: prov, Model: model, Override: in.Override, Classifier: ClassifierFunc(classify)}
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
				return e
			}
			if e, ok := in.Outcomes["*"]; ok {
				return e
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
	var je *jsError
	switch {
	case errors.As(err, &ex):
		return map[string]any{"name": "Error", "message": ex.Error(), "reason": nil}
	case errors.As(err, &pe):
		return map[string]any{"name": "FailoverError", "message": pe.Message, "reason": string(pe.Reason)}
	case errors.As(err, &je):
		name := je.Name
		if name == "" {
			name = "Error"
		}
		return map[string]any{"name": name, "message": je.Message, "reason": nil}
	}
	return map[string]any{"name": "Error", "message": err.Error(), "reason": nil}
}
