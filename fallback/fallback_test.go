package fallback

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

var t0 = time.UnixMilli(1_750_000_000_000)

func refs(cs []Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

func TestCandidates(t *testing.T) {
	t.Parallel()
	cfg := &Config{
		Primary:   "anthropic/claude-opus-4-6",
		Fallbacks: []string{"openai/gpt-5.2", "fast", "gemini-x", " ", "openai/gpt-5.2"},
		Aliases:   map[string]string{"Fast": "google/gemini-2.5-flash"},
	}
	tests := []struct {
		name        string
		cfg         *Config
		prov, model string
		override    []string
		want        []string
	}{
		// Blank request parts come from the primary; aliases resolve, bare ids
		// take the primary's provider, blanks and duplicates drop out.
		{"blank request uses primary", cfg, "", "", nil,
			[]string{"anthropic/claude-opus-4-6", "openai/gpt-5.2", "google/gemini-2.5-flash", "anthropic/gemini-x"}},
		// Another provider that is not in the chain gets no fallbacks, only
		// the primary appended.
		{"other provider outside chain", cfg, "mistral", "large", nil, []string{"mistral/large", "anthropic/claude-opus-4-6"}},
		// A requested model that is itself a fallback gets the whole chain.
		{"requested model in chain", cfg, "openai", "gpt-5.2", nil,
			[]string{"openai/gpt-5.2", "google/gemini-2.5-flash", "anthropic/gemini-x", "anthropic/claude-opus-4-6"}},
		// An override replaces the chain and suppresses the primary.
		{"override", cfg, "anthropic", "claude-opus-4-6", []string{"openai/o3"}, []string{"anthropic/claude-opus-4-6", "openai/o3"}},
		// No configuration: only the request (or the default).
		{"no config", nil, "", "", nil, []string{DefaultProvider + "/" + DefaultModel}},
		// Provider ids are normalised.
		{"provider normalised", nil, "Z.AI", "glm", nil, []string{"zai/glm"}},
		// Model ids keep their own slashes (split at the first one).
		{"nested model id", nil, "openrouter", "anthropic/claude", []string{"openrouter/meta/llama"}, []string{"openrouter/anthropic/claude", "openrouter/meta/llama"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := refs(Candidates(tt.cfg, tt.prov, tt.model, tt.override)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// reasonErr is a classified test error.
type reasonErr struct{ r provider.Reason }

func (e reasonErr) Error() string { return "failed: " + string(e.r) }

func testClassifier(err error) Classification {
	var re reasonErr
	if errors.As(err, &re) {
		return Classification{Reason: re.r, Status: 429}
	}
	return Classification{}
}

func TestPlanCooldown(t *testing.T) {
	t.Parallel()
	cfg := &Config{Primary: "a/one", Fallbacks: []string{"a/two", "b/three"}}
	cooling := func(reason provider.Reason, soonest time.Time) AvailabilityFunc {
		return func(p, _ string) Availability {
			if p == "a" {
				return Availability{Profiles: 1, AllCooling: true, Reason: reason, SoonestExpiry: soonest}
			}
			return Availability{Profiles: 1}
		}
	}
	type step struct {
		ref            string
		probe, cooling bool
	}
	tests := []struct {
		name    string
		prov    string
		model   string
		av      AvailabilityFunc
		last    time.Time // last probe of provider a
		steps   []step
		skipped []string
	}{
		// The requested primary, cooling far from expiry, is skipped; a
		// same-provider fallback is still tried on rate_limit.
		{"rate limit far from expiry", "a", "one", cooling(provider.ReasonRateLimit, t0.Add(time.Hour)), time.Time{},
			[]step{{"a/two", false, true}, {"b/three", false, false}}, []string{"a/one"}},
		// Within the 2-minute margin the primary is probed.
		{"probe near expiry", "a", "one", cooling("", t0.Add(time.Minute)), time.Time{},
			[]step{{"a/one", true, true}, {"a/two", false, true}, {"b/three", false, false}}, nil},
		// A probe 10 s ago closes the throttle.
		{"probe throttled", "a", "one", cooling("", t0.Add(time.Minute)), t0.Add(-10 * time.Second),
			[]step{{"a/two", false, true}, {"b/three", false, false}}, []string{"a/one"}},
		// Unknown expiry allows the probe.
		{"unknown expiry probes", "a", "one", cooling(provider.ReasonTimeout, time.Time{}), time.Time{},
			[]step{{"a/one", true, true}, {"b/three", false, false}}, []string{"a/two"}},
		// A primary that is not the requested model is attempted anyway.
		{"primary not requested", "", "", cooling(provider.ReasonFormat, t0.Add(time.Hour)), time.Time{},
			[]step{{"a/one", false, true}, {"b/three", false, false}}, []string{"a/two"}},
		// Auth issues skip every model of the provider.
		{"auth skips all", "a", "one", cooling(provider.ReasonAuth, t0.Add(time.Minute)), time.Time{},
			[]step{{"b/three", false, false}}, []string{"a/one", "a/two"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			probes := ProbeLog{}
			if !tt.last.IsZero() {
				probes["a"] = tt.last
			}
			p, err := newPlan(Request{Config: cfg, Provider: tt.prov, Model: tt.model, Classifier: ClassifierFunc(testClassifier), Availability: tt.av, Probes: probes})
			if err != nil {
				t.Fatal(err)
			}
			var got []step
			for s, ok := p.Next(t0); ok; s, ok = p.Next(t0) {
				got = append(got, step{s.Candidate.String(), s.Probe, s.DuringCooldown})
				if stop := p.Failed(reasonErr{provider.ReasonRateLimit}); stop != nil {
					t.Fatalf("stopped: %v", stop)
				}
			}
			if !reflect.DeepEqual(got, tt.steps) {
				t.Errorf("steps %v, want %v", got, tt.steps)
			}
			var skipped []string
			for _, a := range p.Attempts() {
				if a.Skipped {
					skipped = append(skipped, a.Candidate.String())
				}
			}
			if !reflect.DeepEqual(skipped, tt.skipped) {
				t.Errorf("skipped %v, want %v", skipped, tt.skipped)
			}
			if len(got) > 0 && got[0].probe && !probes["a"].Equal(t0) {
				t.Errorf("probe not recorded")
			}
		})
	}
}

// TestPlanLastResort: with LastResort, the last candidate is tried although
// its provider is cooling for a transient reason, so a run is never refused
// without a provider call only because of the cooldown bookkeeping; what
// waiting does not mend is still skipped, and earlier candidates keep the
// reference's rule.
func TestPlanLastResort(t *testing.T) {
	t.Parallel()
	cooling := func(reason provider.Reason) AvailabilityFunc {
		return func(string, string) Availability {
			return Availability{Profiles: 1, AllCooling: true, Reason: reason, SoonestExpiry: t0.Add(time.Hour)}
		}
	}
	tests := []struct {
		name       string
		cfg        *Config
		reason     provider.Reason
		lastResort bool
		tried      []string
	}{
		{"the only model, rate limited: tried", &Config{Primary: "a/one"}, provider.ReasonRateLimit, true, []string{"a/one"}},
		{"the only model, overloaded: tried", &Config{Primary: "a/one"}, provider.ReasonOverloaded, true, []string{"a/one"}},
		{"the only model, rate limited, reference rules: skipped", &Config{Primary: "a/one"}, provider.ReasonRateLimit, false, nil},
		{"the only model, billing: skipped", &Config{Primary: "a/one"}, provider.ReasonBilling, true, nil},
		{"the only model, auth: skipped", &Config{Primary: "a/one"}, provider.ReasonAuth, true, nil},
		// The primary is still skipped (no probe due): the fallback is the
		// last resort, and a non-primary rate-limited one is tried anyway.
		{"a chain: the primary skipped, the last tried", &Config{Primary: "a/one", Fallbacks: []string{"b/two"}}, provider.ReasonFormat, true, []string{"b/two"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := Request{Config: tt.cfg, Provider: "a", Model: "one", Classifier: ClassifierFunc(testClassifier),
				Availability: cooling(tt.reason), LastResort: tt.lastResort}
			var tried []string
			_, _ = Run(t.Context(), req, func() time.Time { return t0 }, func(_ context.Context, s Step) error {
				tried = append(tried, s.Candidate.String())
				if !s.Last || !s.DuringCooldown {
					t.Errorf("step %+v: want the last candidate, tried during cooldown", s)
				}
				return reasonErr{provider.ReasonRateLimit}
			})
			if !reflect.DeepEqual(tried, tt.tried) {
				t.Fatalf("tried %v, want %v", tried, tt.tried)
			}
		})
	}
}

func TestPlanErrors(t *testing.T) {
	t.Parallel()
	if _, err := newPlan(Request{}); !errors.Is(err, ErrNoClassifier) {
		t.Errorf("got %v", err)
	}
	// Every candidate skipped: the summary still names them.
	p, _ := newPlan(Request{Config: &Config{Primary: "a/one", Fallbacks: []string{"a/two"}}, Classifier: ClassifierFunc(testClassifier),
		Availability: func(string, string) Availability {
			return Availability{Profiles: 1, AllCooling: true, Reason: provider.ReasonBilling}
		}})
	if _, ok := p.Next(t0); ok {
		t.Fatal("a candidate was not skipped")
	}
	want := "All models failed (2): a/one: Provider a has billing issue (skipping all models) (billing) | a/two: Provider a has billing issue (skipping all models) (billing)"
	if err := p.Err(); err == nil || err.Error() != want {
		t.Errorf("got %v", err)
	}
	// No attempts at all reads "unknown".
	if got := (&ExhaustedError{Candidates: 3}).Error(); got != "All models failed (3): unknown" {
		t.Errorf("got %q", got)
	}
	// The summary unwraps to the last error.
	boom := reasonErr{provider.ReasonTimeout}
	_, err := Run(context.Background(), Request{Config: &Config{Primary: "a/one", Fallbacks: []string{"b/two"}}, Classifier: ClassifierFunc(testClassifier)},
		func() time.Time { return t0 }, func(context.Context, Step) error { return boom })
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Reason != provider.ReasonTimeout || !errors.Is(err, boom) {
		t.Errorf("got %v", err)
	}
	// A cancelled context stops before the next candidate.
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("shutdown")
	calls := 0
	_, err = Run(ctx, Request{Config: &Config{Primary: "a/one", Fallbacks: []string{"b/two"}}, Classifier: ClassifierFunc(testClassifier)},
		func() time.Time { return t0 }, func(context.Context, Step) error { calls++; cancel(stop); return reasonErr{provider.ReasonRateLimit} })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("got %v after %d calls", err, calls)
	}
}
