package authprofile

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/provider"
)

var t0 = time.UnixMilli(1_750_000_000_000)

func at(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

func TestApplyReference(t *testing.T) {
	t.Parallel()
	var ref Config
	tests := []struct {
		name string
		in   State
		ev   Event
		want State
	}{
		// An active cooldown is never moved, even by a later failure.
		{"active cooldown kept",
			State{CooldownUntil: at(time.Minute), ErrorCount: 1, FailureCounts: map[provider.Reason]int{"rate_limit": 1}, LastFailureAt: at(-time.Second)},
			Event{Kind: EventFailure, Provider: "anthropic", Reason: provider.ReasonRateLimit},
			State{CooldownUntil: at(time.Minute), ErrorCount: 2, FailureCounts: map[provider.Reason]int{"rate_limit": 2}, LastFailureAt: at(0)}},
		// Failures older than the 24 h window stop counting.
		{"failure window resets counters",
			State{ErrorCount: 3, FailureCounts: map[provider.Reason]int{"rate_limit": 3}, LastFailureAt: at(-25 * time.Hour)},
			Event{Kind: EventFailure, Provider: "anthropic", Reason: provider.ReasonRateLimit},
			State{CooldownUntil: at(time.Minute), ErrorCount: 1, FailureCounts: map[provider.Reason]int{"rate_limit": 1}, LastFailureAt: at(0)}},
		// auth_permanent disables like billing.
		{"auth_permanent disables",
			State{},
			Event{Kind: EventFailure, Provider: "anthropic", Reason: provider.ReasonAuthPermanent},
			State{DisabledUntil: at(5 * time.Hour), DisabledReason: provider.ReasonAuthPermanent, ErrorCount: 1, FailureCounts: map[provider.Reason]int{"auth_permanent": 1}, LastFailureAt: at(0)}},
		// OpenRouter profiles ignore failures entirely.
		{"openrouter exempt", State{LastUsed: 5}, Event{Kind: EventFailure, Provider: "OpenRouter", Reason: provider.ReasonRateLimit}, State{LastUsed: 5}},
		// A blank reason counts as unknown.
		{"blank reason is unknown", State{}, Event{Kind: EventFailure, Provider: "x"},
			State{CooldownUntil: at(time.Minute), ErrorCount: 1, FailureCounts: map[provider.Reason]int{"unknown": 1}, LastFailureAt: at(0)}},
		// Success clears everything but lastFailureAt.
		{"used clears",
			State{CooldownUntil: at(time.Hour), DisabledUntil: at(time.Hour), DisabledReason: "billing", ErrorCount: 4, FailureCounts: map[provider.Reason]int{"billing": 4}, LastFailureAt: at(-time.Minute)},
			Event{Kind: EventUsed, Provider: "x"},
			State{LastUsed: at(0), LastFailureAt: at(-time.Minute)}},
		// A manual reset does not touch lastUsed.
		{"clear cooldown keeps lastUsed",
			State{LastUsed: 7, CooldownUntil: at(time.Hour), ErrorCount: 2},
			Event{Kind: EventClearCooldown},
			State{LastUsed: 7}},
		// The reference has no per-run memory: failed then used clears.
		{"reference failed then used clears",
			State{CooldownUntil: at(time.Minute), ErrorCount: 1, FailedRun: ""},
			Event{Kind: EventUsed, RunID: "r1"},
			State{LastUsed: at(0)}},
		// Without PerModel a model on the event changes nothing.
		{"model ignored without PerModel", State{}, Event{Kind: EventFailure, Provider: "x", Reason: provider.ReasonRateLimit, Model: "m"},
			State{CooldownUntil: at(time.Minute), ErrorCount: 1, FailureCounts: map[provider.Reason]int{"rate_limit": 1}, LastFailureAt: at(0)}},
		// Without the Retry-After floor a long Retry-After is ignored.
		{"retry-after ignored by reference", State{}, Event{Kind: EventFailure, Provider: "x", Reason: provider.ReasonRateLimit, RetryAfter: time.Hour},
			State{CooldownUntil: at(time.Minute), ErrorCount: 1, FailureCounts: map[provider.Reason]int{"rate_limit": 1}, LastFailureAt: at(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.in.Clone()
			got := ref.Apply(tt.in, tt.ev, t0)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if !reflect.DeepEqual(tt.in, before) {
				t.Errorf("Apply modified its input")
			}
		})
	}
}

func TestApplyFleet(t *testing.T) {
	t.Parallel()
	fleet := Config{Fleet: FleetDefaults()}
	rl := func(model string, retry time.Duration, run string) Event {
		return Event{Kind: EventFailure, Provider: "anthropic", Reason: provider.ReasonRateLimit, Model: model, RetryAfter: retry, RunID: run}
	}

	t.Run("per-model cooldown leaves other models usable", func(t *testing.T) {
		t.Parallel()
		s := fleet.Apply(State{}, rl("opus", 0, ""), t0)
		if !InCooldown("anthropic", s, "opus", t0) || InCooldown("anthropic", s, "sonnet", t0) {
			t.Errorf("state %+v", s)
		}
		if s.ErrorCount != 0 || s.CooldownUntil != 0 {
			t.Errorf("profile-wide counters touched: %+v", s)
		}
		// Billing is about the key, not the model: profile-wide.
		s = fleet.Apply(s, Event{Kind: EventFailure, Provider: "anthropic", Reason: provider.ReasonBilling, Model: "opus"}, t0)
		if !InCooldown("anthropic", s, "sonnet", t0) {
			t.Errorf("billing did not disable the profile")
		}
	})
	t.Run("ladder is capped", func(t *testing.T) {
		t.Parallel()
		s := State{}
		for range 6 {
			s = fleet.Apply(s, rl("opus", 0, ""), time.UnixMilli(max(s.Models["opus"].CooldownUntil, t0.UnixMilli())))
		}
		m := s.Models["opus"]
		if d := time.Duration(m.CooldownUntil-m.LastFailureAt) * time.Millisecond; d != 5*time.Minute || m.ErrorCount != 6 {
			t.Errorf("sixth cooldown %v, errors %d", d, m.ErrorCount)
		}
	})
	t.Run("retry-after is a floor and extends an active window", func(t *testing.T) {
		t.Parallel()
		s := fleet.Apply(State{}, rl("opus", 90*time.Second, ""), t0)
		if s.Models["opus"].CooldownUntil != at(90*time.Second) {
			t.Errorf("got %d", s.Models["opus"].CooldownUntil-at(0))
		}
		// A shorter Retry-After never shortens it.
		s2 := fleet.Apply(s, rl("opus", time.Second, ""), t0.Add(10*time.Second))
		if s2.Models["opus"].CooldownUntil != at(90*time.Second) {
			t.Errorf("window shortened")
		}
		// A longer one extends it.
		s3 := fleet.Apply(s, rl("opus", 10*time.Minute, ""), t0.Add(10*time.Second))
		if s3.Models["opus"].CooldownUntil != at(10*time.Minute+10*time.Second) {
			t.Errorf("window not extended")
		}
	})
	t.Run("failure then used in the same run keeps the failure", func(t *testing.T) {
		t.Parallel()
		s := fleet.Apply(State{}, Event{Kind: EventFailure, Provider: "anthropic", Reason: provider.ReasonAuth, RunID: "run-1"}, t0)
		s = fleet.Apply(s, Event{Kind: EventUsed, Provider: "anthropic", RunID: "run-1"}, t0)
		if !InCooldown("anthropic", s, "", t0) || s.LastUsed != at(0) {
			t.Errorf("same-run success cleared the failure: %+v", s)
		}
		// A later run's success clears it.
		s = fleet.Apply(s, Event{Kind: EventUsed, Provider: "anthropic", RunID: "run-2"}, t0)
		if InCooldown("anthropic", s, "", t0) || s.FailedRun != "" {
			t.Errorf("next run's success did not clear: %+v", s)
		}
	})
	t.Run("used clears only its own model", func(t *testing.T) {
		t.Parallel()
		s := fleet.Apply(State{}, rl("opus", 0, ""), t0)
		s = fleet.Apply(s, rl("haiku", 0, ""), t0)
		s = fleet.Apply(s, Event{Kind: EventUsed, Provider: "anthropic", Model: "haiku"}, t0)
		if _, ok := s.Models["haiku"]; ok || !InCooldown("anthropic", s, "opus", t0) {
			t.Errorf("got %+v", s.Models)
		}
	})
}

func TestProbe(t *testing.T) {
	t.Parallel()
	fleet := Config{Fleet: FleetDefaults()}
	store := Store{
		Profiles: []Profile{
			{ID: "a", Type: TypeAPIKey, Provider: "anthropic", Key: "k1"},
			{ID: "b", Type: TypeAPIKey, Provider: "anthropic", Key: "k2"},
		},
		Order: map[string][]string{"anthropic": {"a", "b"}},
		Usage: map[string]State{"a": {CooldownUntil: at(time.Minute)}},
	}
	// Reference: the cooling primary goes last.
	if got := Order(store, Config{}, OrderRequest{Provider: "anthropic"}, t0); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Errorf("reference order %v", got)
	}
	// Fleet: within 2 minutes of expiry it keeps its place and is probed.
	ids := Order(store, fleet, OrderRequest{Provider: "anthropic"}, t0)
	if !reflect.DeepEqual(ids, []string{"a", "b"}) {
		t.Fatalf("fleet order %v", ids)
	}
	sel := Select(store, fleet, ids, "", t0)
	if sel.ID != "a" || !sel.Probe {
		t.Fatalf("selection %+v", sel)
	}
	// Once claimed, no second probe within 30 s: the next profile is used.
	store.Usage["a"] = fleet.Apply(store.Usage["a"], Event{Kind: EventProbe}, t0)
	ids = Order(store, fleet, OrderRequest{Provider: "anthropic"}, t0.Add(10*time.Second))
	if sel := Select(store, fleet, ids, "", t0.Add(10*time.Second)); sel.ID != "b" || sel.Probe {
		t.Errorf("selection after claim %+v", sel)
	}
	// A failure 10 s ago blocks the probe: no immediate retry of what just failed.
	if fleet.CanProbe("anthropic", State{CooldownUntil: at(time.Minute), LastFailureAt: at(-10 * time.Second)}, "", t0) {
		t.Errorf("probe allowed right after a failure")
	}
	// A pending Retry-After blocks the probe even near expiry.
	if fleet.CanProbe("anthropic", State{CooldownUntil: at(time.Minute), LastFailureAt: at(-time.Minute), RetryUntil: at(time.Minute)}, "", t0) {
		t.Errorf("probe allowed before Retry-After")
	}
	// Far from expiry: no probe.
	store.Usage["a"] = State{CooldownUntil: at(time.Hour)}
	if fleet.CanProbe("anthropic", store.Usage["a"], "", t0) {
		t.Errorf("probe allowed an hour before expiry")
	}
	// Disabled profiles are never probed.
	store.Usage["a"] = State{DisabledUntil: at(time.Minute), DisabledReason: "billing"}
	if fleet.CanProbe("anthropic", store.Usage["a"], "", t0) {
		t.Errorf("probe allowed on a disabled profile")
	}
	// All cooling and nothing probeable.
	store.Usage["b"] = State{CooldownUntil: at(time.Hour)}
	if sel := Select(store, fleet, []string{"a", "b"}, "", t0); sel.ID != "" || !sel.AllInCooldown {
		t.Errorf("selection %+v", sel)
	}
}

func TestOrderEdges(t *testing.T) {
	t.Parallel()
	p := func(id string, typ CredentialType) Profile {
		return Profile{ID: id, Type: typ, Provider: "anthropic", Key: "k", Token: "t", Access: "a"}
	}
	tests := []struct {
		name  string
		store Store
		cfg   Config
		req   OrderRequest
		want  []string
	}{
		// Equal type and lastUsed keep file order (stable sort).
		{"ties keep file order", Store{Profiles: []Profile{p("z", TypeAPIKey), p("a", TypeAPIKey)}}, Config{}, OrderRequest{Provider: "anthropic"}, []string{"z", "a"}},
		// A stored explicit order beats the configured one.
		{"stored order first", Store{Profiles: []Profile{p("a", TypeAPIKey), p("b", TypeAPIKey)}, Order: map[string][]string{"Anthropic": {"b", "a"}}},
			Config{Order: map[string][]string{"anthropic": {"a", "b"}}}, OrderRequest{Provider: "anthropic"}, []string{"b", "a"}},
		// An explicit empty order means no profiles.
		{"explicit empty order", Store{Profiles: []Profile{p("a", TypeAPIKey)}, Order: map[string][]string{"anthropic": {}}}, Config{}, OrderRequest{Provider: "anthropic"}, []string{}},
		// Duplicates in an explicit order are dropped.
		{"dedupe", Store{Profiles: []Profile{p("a", TypeAPIKey), p("b", TypeAPIKey)}}, Config{Order: map[string][]string{"anthropic": {"a", "b", "a"}}}, OrderRequest{Provider: "anthropic"}, []string{"a", "b"}},
		// A preferred profile that is not in the list is ignored.
		{"unknown preferred", Store{Profiles: []Profile{p("a", TypeAPIKey)}}, Config{}, OrderRequest{Provider: "anthropic", Preferred: "nope"}, []string{"a"}},
		// Mode oauth accepts a token credential.
		{"oauth mode accepts token", Store{Profiles: []Profile{p("t", TypeToken)}}, Config{Profiles: []ProfileConfig{{ID: "t", Provider: "anthropic", Mode: TypeOAuth}}}, OrderRequest{Provider: "anthropic"}, []string{"t"}},
		// A configured entry for another provider invalidates the profile
		// (and, as it exists in the store, there is no fallback).
		{"config provider mismatch", Store{Profiles: []Profile{p("a", TypeAPIKey)}}, Config{Profiles: []ProfileConfig{{ID: "a", Provider: "openai", Mode: TypeAPIKey}}, Order: map[string][]string{"anthropic": {"a"}}}, OrderRequest{Provider: "anthropic"}, []string{}},
		// OpenRouter profiles are never cooling.
		{"openrouter never cooling", Store{Profiles: []Profile{{ID: "o1", Type: TypeAPIKey, Provider: "openrouter", Key: "k"}, {ID: "o2", Type: TypeAPIKey, Provider: "openrouter", Key: "k"}},
			Usage: map[string]State{"o1": {CooldownUntil: at(time.Hour)}, "o2": {LastUsed: 5}}}, Config{}, OrderRequest{Provider: "openrouter"}, []string{"o1", "o2"}},
		// Per-model windows only matter for the model asked about.
		{"model window", Store{Profiles: []Profile{p("a", TypeAPIKey), p("b", TypeAPIKey)}, Usage: map[string]State{"a": {Models: map[string]ModelState{"opus": {CooldownUntil: at(time.Hour)}}}}},
			Config{}, OrderRequest{Provider: "anthropic", Model: "opus"}, []string{"b", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Order(tt.store, tt.cfg, tt.req, t0)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUnavailableReasonEdges(t *testing.T) {
	t.Parallel()
	usage := map[string]State{
		"a": {DisabledUntil: at(time.Hour), DisabledReason: "billing"},
		"b": {CooldownUntil: at(time.Hour), FailureCounts: map[provider.Reason]int{"auth": 999}},
		"c": {CooldownUntil: at(-time.Hour), FailureCounts: map[provider.Reason]int{"format": 5000}},
		"d": {CooldownUntil: at(time.Hour), FailureCounts: map[provider.Reason]int{"timeout": 1, "rate_limit": 1}},
	}
	tests := []struct {
		name string
		ids  []string
		want provider.Reason
	}{
		// A disable outweighs any count below 1000.
		{"disable scores 1000", []string{"a", "b"}, "billing"},
		// Expired windows do not count.
		{"expired ignored", []string{"c"}, ""},
		// Ties go to the earlier reason of the priority list.
		{"tie by priority", []string{"d"}, "timeout"},
		// Unknown ids are ignored.
		{"unknown id", []string{"zz"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := UnavailableReason(usage, tt.ids, "", t0); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	store := Store{
		Profiles: []Profile{{ID: "a", Type: TypeAPIKey, Provider: "anthropic", Key: "k"}},
		Usage:    map[string]State{"a": {CooldownUntil: at(time.Minute)}},
	}
	st := Status(store, Config{}, "anthropic", "", t0)
	if !st.AllCooling || st.Reason != provider.ReasonRateLimit || !st.SoonestExpiry.Equal(time.UnixMilli(at(time.Minute))) {
		t.Errorf("got %+v", st)
	}
	if st := Status(store, Config{}, "openai", "", t0); st.Profiles != 0 || st.AllCooling {
		t.Errorf("openai %+v", st)
	}
}

func TestDisableFor(t *testing.T) {
	t.Parallel()
	c := Config{Cooldowns: Cooldowns{BillingBackoffHours: 2, BillingBackoffHoursByProvider: map[string]float64{"Z.AI": 1}, BillingMaxHours: 0.5}}
	// Per-provider base, keys normalised; max never below base.
	if got := c.DisableFor("zai", 3); got != time.Hour {
		t.Errorf("zai: %v", got)
	}
	if got := c.DisableFor("anthropic", 1); got != 2*time.Hour {
		t.Errorf("anthropic: %v", got)
	}
	// The exponent stops at 10.
	big := Config{Cooldowns: Cooldowns{BillingMaxHours: 1e6}}
	if got, want := big.DisableFor("x", 50), BillingBackoffDefault*1024; got != want {
		t.Errorf("exponent cap: %v, want %v", got, want)
	}
}

func TestDecodeStore(t *testing.T) {
	t.Parallel()
	s, err := DecodeStore([]byte(`{"version":1,"profiles":{
		"b":{"mode":"api_key","provider":"anthropic","apiKey":"sk-secret"},
		"a":{"type":"token","provider":"anthropic","token":"tok","expires":1.5e12},
		"bad":{"type":"password","provider":"x"},
		"nop":{"type":"api_key","key":"k"},
		"num":42},
		"usageStats":{"b":{"lastUsed":"soon","cooldownUntil":-5,"errorCount":2.7,"failureCounts":{"rate_limit":"x","auth":1}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Profiles) != 2 || s.Profiles[0].ID != "b" || s.Profiles[1].ID != "a" {
		t.Fatalf("profiles %+v", s.Profiles)
	}
	if s.Profiles[0].Key.Reveal() != "sk-secret" || s.Profiles[1].Expires != 1_500_000_000_000 {
		t.Errorf("fields %+v", s.Profiles)
	}
	if got := s.Usage["b"]; got.LastUsed != 0 || got.CooldownUntil != 0 || got.ErrorCount != 2 || len(got.FailureCounts) != 1 {
		t.Errorf("usage %+v", got)
	}
	// Secrets never print or marshal.
	text := fmt.Sprintf("%v %+v %#v", s.Profiles[0], s.Profiles[0], s.Profiles[0])
	data, _ := json.Marshal(s.Profiles[0])
	if strings.Contains(text+string(data), "sk-secret") {
		t.Errorf("secret leaked: %s %s", text, data)
	}
	for _, bad := range []string{`[]`, `{"profiles":[1]}`, `not json`} {
		if _, err := DecodeStore([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	t.Parallel()
	s := State{LastUsed: 1, CooldownUntil: 2, DisabledUntil: 3, DisabledReason: "billing", ErrorCount: 4,
		FailureCounts: map[provider.Reason]int{"billing": 4}, LastFailureAt: 5, LastProbeAt: 6, FailedRun: "r", RetryUntil: 10,
		Models: map[string]ModelState{"m": {CooldownUntil: 7, ErrorCount: 1, FailureCounts: map[provider.Reason]int{"rate_limit": 1}, LastFailureAt: 8, LastProbeAt: 9, RetryUntil: 11}}}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var j State
	if err := json.Unmarshal(data, &j); err != nil || !reflect.DeepEqual(j, s) {
		t.Errorf("json: %v %+v", err, j)
	}
	mp, err := msgpack.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m State
	if err := msgpack.Unmarshal(mp, &m); err != nil || !reflect.DeepEqual(m, s) {
		t.Errorf("msgpack: %v %+v", err, m)
	}
}

func FuzzDecodeStore(f *testing.F) {
	f.Add([]byte(`{"version":1,"profiles":{"a":{"type":"api_key","provider":"anthropic","key":"k"}},"usageStats":{"a":{"cooldownUntil":1750000060000,"failureCounts":{"auth":2}}}}`))
	f.Add([]byte(`{"profiles":{"a":{"mode":"oauth","provider":"Z.AI","access":"x","expires":1e400}},"order":{"zai":["a","a"]}}`))
	f.Add([]byte(`{"profiles":null,"usageStats":{"x":null}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeStore(data)
		if err != nil {
			return
		}
		cfg := Config{Fleet: FleetDefaults()}
		for _, prov := range []string{"anthropic", "zai", ""} {
			ids := Order(*s, cfg, OrderRequest{Provider: prov, Model: "m"}, t0)
			_ = Select(*s, cfg, ids, "m", t0)
			_ = Status(*s, Config{}, prov, "", t0)
		}
		for id, st := range s.Usage {
			st2 := cfg.Apply(st, Event{Kind: EventFailure, Provider: "anthropic", Reason: provider.ReasonBilling, Model: "m"}, t0)
			if st2.DisabledUntil <= t0.UnixMilli() {
				t.Fatalf("%s: billing failure left no active disable: %+v", id, st2)
			}
			if c, _ := ClearExpired(st, t0); c.CooldownUntil != 0 && c.CooldownUntil <= t0.UnixMilli() {
				t.Fatalf("expired window kept")
			}
		}
	})
}

func TestLastResort(t *testing.T) {
	t.Parallel()
	fleet := Config{Fleet: FleetDefaults()}
	rl := map[provider.Reason]int{provider.ReasonRateLimit: 1}
	tests := []struct {
		name   string
		cfg    Config
		usage  map[string]State
		wantID string
		wantAt int64 // 0 = none
	}{
		{"no Retry-After pending: the first, now", fleet, map[string]State{
			"a": {CooldownUntil: at(time.Minute), FailureCounts: rl},
			"b": {CooldownUntil: at(time.Minute), FailureCounts: rl}}, "a", at(0)},
		{"the one whose Retry-After ends first", fleet, map[string]State{
			"a": {CooldownUntil: at(time.Minute), FailureCounts: rl, RetryUntil: at(20 * time.Second)},
			"b": {Models: map[string]ModelState{"m": {CooldownUntil: at(time.Minute), FailureCounts: rl, RetryUntil: at(5 * time.Second)}}}}, "b", at(5 * time.Second)},
		{"another model's Retry-After does not count", fleet, map[string]State{
			"a": {CooldownUntil: at(time.Minute), FailureCounts: rl, Models: map[string]ModelState{"other": {RetryUntil: at(time.Hour)}}}}, "a", at(0)},
		{"an ended Retry-After counts as now", fleet, map[string]State{
			"a": {CooldownUntil: at(time.Minute), FailureCounts: rl, RetryUntil: at(-time.Second)}}, "a", at(0)},
		{"disabled and refused keys are no last resort", fleet, map[string]State{
			"a": {DisabledUntil: at(time.Hour), DisabledReason: provider.ReasonBilling, FailureCounts: map[provider.Reason]int{provider.ReasonBilling: 1}},
			"b": {CooldownUntil: at(time.Minute), FailureCounts: map[provider.Reason]int{provider.ReasonAuth: 1}}}, "", 0},
		{"the reference has none", Config{}, map[string]State{"a": {CooldownUntil: at(time.Minute), FailureCounts: rl}}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, when, ok := tt.cfg.LastResort(Store{Usage: tt.usage}, []string{"a", "b"}, "m", t0)
			if id != tt.wantID || ok != (tt.wantID != "") || (ok && when.UnixMilli() != tt.wantAt) {
				t.Fatalf("LastResort = %q, %v, %v; want %q at %d", id, when.UnixMilli(), ok, tt.wantID, tt.wantAt)
			}
		})
	}
}

// TestUnusableWindows: windows that are zero, negative or not numbers are
// no windows at all (runtime spec §17.5): the profile is not cooling, they
// are not "expired" (nothing is cleared, the counters stay), a failure
// opens a fresh window, and they weigh nothing in the unavailable reason.
func TestUnusableWindows(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"cooldownUntil":0,"disabledUntil":0,"errorCount":2,"failureCounts":{"rate_limit":2}}`,
		`{"cooldownUntil":-60000,"disabledUntil":-1,"disabledReason":"billing","errorCount":2,"failureCounts":{"rate_limit":2}}`,
		`{"cooldownUntil":"soon","disabledUntil":null,"errorCount":2,"failureCounts":{"rate_limit":2}}`,
		`{"cooldownUntil":1e400,"errorCount":2,"failureCounts":{"rate_limit":2}}`,
	} {
		var st State
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			// 1e400 is not a JSON number Go reads: the reference's
			// Infinity is just as unusable.
			if strings.Contains(raw, "1e400") {
				continue
			}
			t.Fatalf("%s: %v", raw, err)
		}
		if InCooldown("anthropic", st, "", t0) || InCooldown("anthropic", st, "m", t0) {
			t.Errorf("%s: cooling", raw)
		}
		if after, changed := ClearExpired(st, t0); changed || after.ErrorCount != 2 || after.FailureCounts[provider.ReasonRateLimit] != 2 {
			t.Errorf("%s: cleared %v to %+v", raw, changed, after)
		}
		if r := UnavailableReason(map[string]State{"a": st}, []string{"a"}, "", t0); r != "" {
			t.Errorf("%s: unavailable reason %q", raw, r)
		}
		got := Config{}.Apply(st, Event{Kind: EventFailure, Provider: "anthropic", Reason: provider.ReasonRateLimit}, t0)
		if got.CooldownUntil != at(CooldownFor(3)) || got.ErrorCount != 3 {
			t.Errorf("%s: after a failure %+v, want a fresh window of the third step", raw, got)
		}
		store := Store{Profiles: []Profile{{ID: "a", Type: TypeAPIKey, Provider: "anthropic", Key: "k"}, {ID: "b", Type: TypeAPIKey, Provider: "anthropic", Key: "k"}},
			Order: map[string][]string{"anthropic": {"a", "b"}}, Usage: map[string]State{"a": st}}
		if ids := Order(store, Config{}, OrderRequest{Provider: "anthropic"}, t0); !reflect.DeepEqual(ids, []string{"a", "b"}) {
			t.Errorf("%s: order %v", raw, ids)
		}
	}
}
