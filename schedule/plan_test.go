package schedule

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// shape renders decisions as "fired@2 skipped@4 missed@6x3", due times in
// seconds after t0.
func shape(t0 time.Time, ds []Decision) string {
	var b []string
	for _, d := range ds {
		s := fmt.Sprintf("%s@%d", d.Outcome, int(d.Due.Sub(t0)/time.Second))
		if d.Count > 1 {
			s += fmt.Sprintf("x%d", d.Count)
		}
		b = append(b, s)
	}
	return strings.Join(b, " ")
}

func TestPlan(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_800_000_000, 0)
	every2 := Spec{EveryMs: 2000, AnchorMs: t0.UnixMilli()}
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, c := range []struct {
		name    string
		spec    Spec
		overlap Overlap
		catchUp CatchUp
		last    time.Time
		now     time.Time
		prev    Previous
		want    string
		next    int // seconds after t0; -1: none
	}{
		{"on time", every2, OverlapSkip, CatchUpOne, sec(0), sec(2.3), PrevDone, "fired@2", 4},
		{"nothing due yet", every2, OverlapSkip, CatchUpOne, sec(2), sec(3), PrevDone, "", 4},
		{"skip while the previous runs", every2, OverlapSkip, CatchUpOne, sec(0), sec(2.1), PrevRunning, "skipped@2", 4},
		{"skip while the previous waits", every2, OverlapSkip, CatchUpOne, sec(0), sec(2.1), PrevWaiting, "skipped@2", 4},
		{"buffer one behind a running turn", every2, OverlapBufferOne, CatchUpOne, sec(0), sec(2.1), PrevRunning, "fired@2", 4},
		{"buffer one: one waits already", every2, OverlapBufferOne, CatchUpOne, sec(0), sec(2.1), PrevWaiting, "skipped@2", 4},
		{"allow", every2, OverlapAllow, CatchUpOne, sec(0), sec(2.1), PrevWaiting, "fired@2", 4},
		// The fleet was down from 1 s to 11.5 s: 2, 4, 6, 8 missed, 10 on time.
		{"catch-up one with one on time", every2, OverlapAllow, CatchUpOne, sec(0), sec(11.5), PrevDone, "missed@2 missed@4 missed@6 missed@8 fired@10", 12},
		{"catch-up all", every2, OverlapAllow, CatchUpAll, sec(0), sec(11.5), PrevDone, "fired@2 fired@4 fired@6 fired@8 fired@10", 12},
		{"catch-up all under skip sends the first only", every2, OverlapSkip, CatchUpAll, sec(0), sec(11.5), PrevDone, "fired@2 skipped@4 skipped@6 skipped@8 skipped@10", 12},
		{"catch-up none fires the on-time one", every2, OverlapAllow, CatchUpNone, sec(0), sec(11.5), PrevDone, "missed@2 missed@4 missed@6 missed@8 fired@10", 12},
		// An hourly cron, the fleet down for 2.5 hours: none on time.
		{"hourly, one", Spec{Cron: "@hourly"}, OverlapSkip, CatchUpOne, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 2, 30, 0, 0, time.UTC), PrevDone, "", 0},
		{"one-shot fires once", Spec{AtMs: sec(5).UnixMilli()}, OverlapSkip, CatchUpNone, sec(0), sec(5.2), PrevDone, "fired@5", -1},
		{"one-shot late under none is missed", Spec{AtMs: sec(5).UnixMilli()}, OverlapSkip, CatchUpNone, sec(0), sec(500), PrevDone, "missed@5", -1},
		{"one-shot late under one fires", Spec{AtMs: sec(5).UnixMilli()}, OverlapSkip, CatchUpOne, sec(0), sec(500), PrevDone, "fired@5", -1},
		{"a long outage under all fires the newest 100 and the on-time one", every2, OverlapAllow, CatchUpAll, sec(0), sec(1000.5), PrevDone, "", 1002},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tm, err := c.spec.Compile()
			if err != nil {
				t.Fatal(err)
			}
			ds, next, ok := Plan(tm, c.overlap, c.catchUp, c.last, c.now, c.prev)
			switch c.name {
			case "hourly, one":
				h := func(n int) time.Time { return time.Date(2027, 1, 1, n, 0, 0, 0, time.UTC) }
				if got := shape(h(0), ds); got != "missed@3600 fired@7200" || !next.Equal(h(3)) {
					t.Fatalf("got %q, next %v", got, next)
				}
				return
			case "a long outage under all fires the newest 100 and the on-time one":
				// 2 … 1000: 399 missed (the latest 798), 100 caught up, 1000 on time.
				if len(ds) != 102 || ds[0].Outcome != Missed || ds[0].Count != 399 || !ds[0].Due.Equal(sec(798)) || !ds[1].Due.Equal(sec(800)) || ds[1].Outcome != Fired || ds[101].Outcome != Fired || !ds[101].Due.Equal(sec(1000)) {
					t.Fatalf("got %d decisions: first %+v, second %+v", len(ds), ds[0], ds[1])
				}
				return
			}
			if got := shape(t0, ds); got != c.want {
				t.Errorf("decisions %q, want %q", got, c.want)
			}
			if c.next < 0 {
				if ok {
					t.Errorf("next %v, want none", next)
				}
			} else if !ok || !next.Equal(sec(float64(c.next))) {
				t.Errorf("next %v (%v), want %d s", next.Sub(t0), ok, c.next)
			}
		})
	}
}

func TestParsePolicies(t *testing.T) {
	t.Parallel()
	if o, err := ParseOverlap(""); err != nil || o != OverlapSkip {
		t.Errorf("default overlap %q %v", o, err)
	}
	if c, err := ParseCatchUp(""); err != nil || c != CatchUpOne {
		t.Errorf("default catch-up %q %v", c, err)
	}
	if _, err := ParseOverlap("buffer-all"); err == nil {
		t.Error("buffer-all accepted")
	}
	if _, err := ParseCatchUp("some"); err == nil {
		t.Error("some accepted")
	}
}

// TestEveryCountsFromAnchor: an @every schedule's first firing is one
// interval after its anchor, whatever time it is asked from before it.
func TestEveryCountsFromAnchor(t *testing.T) {
	t.Parallel()
	anchor := time.Unix(1_800_000_000, 0)
	tm, err := Spec{EveryMs: 5000, AnchorMs: anchor.UnixMilli()}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, want time.Duration }{
		{-time.Hour, 5 * time.Second}, {-time.Second, 5 * time.Second}, {0, 5 * time.Second},
		{4999 * time.Millisecond, 5 * time.Second}, {5 * time.Second, 10 * time.Second},
	} {
		if got, _ := tm.Next(anchor.Add(c.from)); !got.Equal(anchor.Add(c.want)) {
			t.Errorf("Next(anchor%+v) = anchor%+v, want anchor+%v", c.from, got.Sub(anchor), c.want)
		}
	}
}
