package governance

import (
	"errors"
	"testing"
	"time"
)

func TestParseRateRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want RateRule
		err  bool
	}{
		{"openai/*=rpm:500,tpm:200000", RateRule{"openai/*", RateLimit{500, 200000}}, false},
		{"profile:anthropic:work=tpm:40000", RateRule{"profile:anthropic:work", RateLimit{TPM: 40000}}, false},
		{"*=rpm:1", RateRule{"*", RateLimit{RPM: 1}}, false},
		{"openai/*", RateRule{}, true},                          // no limits
		{"openai/*=rpm:0", RateRule{}, true},                    // zero is no limit: say so by leaving it out
		{"openai/*=rpm:-3", RateRule{}, true},                   // negative
		{"openai/*=rps:3", RateRule{}, true},                    // unknown unit
		{"=rpm:3", RateRule{}, true},                            // no pattern
		{"open ai/*=rpm:3", RateRule{}, true},                   // a space
		{"openai/*=rpm:99999999999999999999", RateRule{}, true}, // overflow
	}
	for _, tt := range tests {
		got, err := ParseRateRule(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseRateRule(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !errors.Is(err, ErrBadRate) {
			t.Errorf("ParseRateRule(%q): %v is not ErrBadRate", tt.in, err)
		}
		if err == nil && got.String() != tt.in {
			t.Errorf("String() = %q; want %q", got.String(), tt.in)
		}
	}
}

func TestRateRuleMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, provider, model, profile string
		want                              bool
	}{
		{"openai/*", "openai", "gpt-5", "", true},
		{"openai/*", "openrouter", "openai/gpt-5", "", false},
		{"openrouter/*", "openrouter", "anthropic/claude", "", true}, // '*' crosses '/'
		{"*/claude-*", "anthropic", "claude-sonnet-4-6", "", true},
		{"anthropic/claude-sonnet-4-6", "anthropic", "claude-sonnet-4-6-x", "", false},
		{"profile:openai:*", "openai", "gpt-5", "openai:work", true},
		{"profile:openai:*", "openai", "gpt-5", "", false}, // no profile: the environment's key
		{"*", "local", "llama", "", true},
	}
	for _, tt := range tests {
		r := RateRule{Pattern: tt.pattern, Limit: RateLimit{RPM: 1}}
		if got := r.Matches(tt.provider, tt.model, tt.profile); got != tt.want {
			t.Errorf("%q matches %s/%s (profile %q) = %v; want %v", tt.pattern, tt.provider, tt.model, tt.profile, got, tt.want)
		}
	}
}

// A rate limit's window: a call that does not fit is told when it will
// (Free), never pauses anything, and its slots count every 60-second span.
func TestRateWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	st := State{Limits: RateLimit{RPM: 3}.Limits()}
	one := RateNeed(0, 0)
	for i := range 3 {
		now := t0.Add(time.Duration(i) * 10 * time.Second)
		if err := st.Reserve(Reservation{ID: "c", Amount: one, Expires: now.Add(time.Minute).UnixMilli()}, now); err != nil {
			t.Fatal(err)
		}
		st.Settle("c", RateReal(0), now)
	}
	now := t0.Add(30 * time.Second)
	err := st.Reserve(Reservation{ID: "c", Amount: one, Expires: now.Add(time.Minute).UnixMilli()}, now)
	ex, ok := errors.AsType[*ExceededError](err)
	if !ok || !ex.Waits() || ex.Held() {
		t.Fatalf("a fourth call in the minute: %v; want it to wait for the window", err)
	}
	if st.Refused != nil || st.Paused(now) {
		t.Fatal("a rate limit paused its calls")
	}
	// The first call leaves the window with its slot, a window after it
	// (62 s), which is after every 60-second span holding it.
	free := time.UnixMilli(ex.Free)
	if d := free.Sub(t0); d < 60*time.Second || d > 62*time.Second+RateWindow.Rolling/RollingSlots {
		t.Fatalf("free at t0+%v; want within a slot of t0+62s", d)
	}
	if err := st.Fits(one, free.Add(-time.Millisecond)); err == nil {
		t.Fatal("fits before Free")
	}
	if err := st.Fits(one, free); err != nil {
		t.Fatalf("does not fit at Free: %v", err)
	}
}
