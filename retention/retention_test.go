package retention

import (
	"errors"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/deptest"
)

// TestDeps keeps the policy pure.
func TestDeps(t *testing.T) {
	t.Parallel()
	deptest.NoImports(t, deptest.Contains("nats-io"), deptest.Prefix("github.com/lanefleet/lanefleet/"))
}

func TestDecide(t *testing.T) {
	t.Parallel()
	cutoff := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		lane Lane
		want Verdict
	}{
		{"written before the cutoff: idle", Lane{LastWrite: cutoff.Add(-time.Second)}, Forget},
		{"written at the cutoff: kept", Lane{LastWrite: cutoff}, Keep},
		{"written after the cutoff", Lane{LastWrite: cutoff.Add(time.Second)}, Keep},
		{"idle but a message waits: about to speak", Lane{LastWrite: cutoff.Add(-time.Hour), Pending: true}, Keep},
		{"no transcript or settings: nothing to forget", Lane{}, Keep},
	} {
		if got := Decide(c.lane, cutoff); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ttl    time.Duration
		ok, on bool
	}{
		{0, true, false},
		{MinSessionTTL, true, true},
		{30 * 24 * time.Hour, true, true},
		{time.Millisecond, false, true},
		{-time.Hour, false, false},
	} {
		p := Policy{SessionTTL: c.ttl}
		err := p.Validate()
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrBadPolicy)) {
			t.Errorf("Validate(%v) = %v", c.ttl, err)
		}
		if p.Enabled() != c.on {
			t.Errorf("Enabled(%v) = %v", c.ttl, p.Enabled())
		}
	}
	now := time.Now()
	if got := (Policy{SessionTTL: time.Hour}).Cutoff(now); !got.Equal(now.Add(-time.Hour)) {
		t.Errorf("Cutoff = %v", got)
	}
}

// TestPace: the pass's budget, its rests and its lag.
func TestPace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		policy Policy
		want   int
	}{
		{"default rate", Policy{}, DefaultRate},
		{"set rate", Policy{Rate: 7}, 7},
	} {
		if got := c.policy.Budget(); got != c.want {
			t.Errorf("%s: budget %d, want %d", c.name, got, c.want)
		}
	}
	if err := (Policy{Rate: -1}).Validate(); !errors.Is(err, ErrBadPolicy) {
		t.Errorf("rate -1: %v, want ErrBadPolicy", err)
	}
	for _, c := range []struct {
		name   string
		took   time.Duration
		forgot int
		budget int
		want   time.Duration
	}{
		{"a step rests as long as it took", 10 * time.Millisecond, 0, 100, 10 * time.Millisecond},
		{"sessions forgotten fast wait for their share of the second", time.Millisecond, 4, 100, 39 * time.Millisecond},
		{"a slow step rests as long as it took", 50 * time.Millisecond, 4, 100, 50 * time.Millisecond},
		{"a zero budget is one a pass", 0, 1, 0, PassEvery},
	} {
		if got := Rest(c.took, c.forgot, c.budget); got != c.want {
			t.Errorf("%s: rest %v, want %v", c.name, got, c.want)
		}
	}
	cutoff := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		next    time.Time
		reached bool
		want    time.Duration
	}{
		{"reached the cutoff", cutoff.Add(-time.Hour), true, 0},
		{"stopped an hour before it", cutoff.Add(-time.Hour), false, time.Hour},
		{"left nothing", time.Time{}, false, 0},
		{"left only later messages", cutoff.Add(time.Second), false, 0},
	} {
		if got := Lag(cutoff, c.next, c.reached); got != c.want {
			t.Errorf("%s: lag %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSkip: a failing lane holds the pass SkipAfter-1 times, then is
// skipped while the retry list has room, and waits longer each retry.
func TestSkip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		tries, waiting int
		want           bool
	}{
		{"a first failure holds the pass", 1, 0, false},
		{"one short of SkipAfter holds it", SkipAfter - 1, 0, false},
		{"SkipAfter failures move past it", SkipAfter, 0, true},
		{"more failures too", SkipAfter + 5, MaxRetries - 1, true},
		{"a full retry list holds it", SkipAfter, MaxRetries, false},
	} {
		if got := Skip(c.tries, c.waiting); got != c.want {
			t.Errorf("%s: Skip(%d, %d) = %v, want %v", c.name, c.tries, c.waiting, got, c.want)
		}
	}
	for _, c := range []struct {
		tries int
		want  time.Duration
	}{
		{SkipAfter, time.Minute},
		{SkipAfter + 1, 2 * time.Minute},
		{SkipAfter + 5, 32 * time.Minute},
		{SkipAfter + 6, time.Hour},
		{1 << 30, time.Hour},
	} {
		if got := RetryAfter(c.tries); got != c.want {
			t.Errorf("RetryAfter(%d) = %v, want %v", c.tries, got, c.want)
		}
	}
}

// TestStep: a pass that keeps up looks at StepLanes lanes at once; one
// behind looks at twice as many for each StepBehind, up to MaxStepLanes.
// (Four at a time whatever the lag fell behind for good in the soak on a
// loaded box: ~2 sessions forgotten a second where ~2 began, lag 49 s →
// 102 s over five rounds.)
func TestStep(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		behind time.Duration
		want   int
	}{
		{0, StepLanes},
		{-time.Second, StepLanes},
		{StepBehind - time.Millisecond, StepLanes},
		{StepBehind, 2 * StepLanes},
		{3 * StepBehind, 8 * StepLanes},
		{time.Hour, MaxStepLanes},
		{1<<63 - 1, MaxStepLanes},
	} {
		if got := Step(c.behind); got != c.want {
			t.Errorf("Step(%v) = %d, want %d", c.behind, got, c.want)
		}
	}
}
