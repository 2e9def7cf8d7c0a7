package fleet

import (
	"runtime/debug"
	"testing"
	"time"
)

// TestTuneGC: the worker's collector target is GCPercent unless GOGC is
// set, which then stays the operator's.
func TestTuneGC(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	TuneGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != GCPercent {
		t.Fatalf("without GOGC the target is %d, want %d", got, GCPercent)
	}
	TuneGC(func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("with GOGC set the target moved to %d", got)
	}
}

// TestIdleRelease: memory goes back once per idle spell: after the turn
// count has stayed the same for the whole wait, not while turns run, and
// not again until a turn has run since.
func TestIdleRelease(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := idleRelease{after: 30 * time.Second}
	for _, st := range []struct {
		at    float64
		turns int64
		want  bool
		why   string
	}{
		{0, 5, false, "the first look starts a spell"},
		{29, 5, false, "idle, not yet long enough"},
		{31, 6, false, "a turn ran: a new spell starts"},
		{60, 6, false, "29 s into it"},
		{61, 6, true, "30 s without a turn: release"},
		{200, 6, false, "released once per spell, however long it lasts"},
		{201, 7, false, "busy again"},
		{231, 7, true, "idle again for 30 s: release again"},
	} {
		if got := r.observe(at(st.at), st.turns); got != st.want {
			t.Fatalf("at %v s with %d turns (%s): release %v, want %v", st.at, st.turns, st.why, got, st.want)
		}
	}
}

// TestMemberReleasesWhenIdle (issue "what a new user trips over" item 14):
// a member that ran turns and then none gives its free memory back to the
// operating system instead of holding its peak as long as it idles (once
// per idle spell: TestIdleRelease).
func TestMemberReleasesWhenIdle(t *testing.T) {
	t.Parallel()
	m, c, ctx := runMember(t, Config{DataDir: t.TempDir(), DefaultModel: "scripted/echo", Env: noEnv, IdleRelease: 100 * time.Millisecond})
	run, err := c.Send(ctx, "idle", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for m.released.Load() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the idle member never released its memory")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
