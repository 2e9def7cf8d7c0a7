package fleet

import (
	"testing"
	"time"
)

// TestShortRunsAreNotListed: a run that ends within registerAfter never
// writes the active-run registry (two writes a turn saved); a longer one is
// listed while it runs and gone once it ends.
func TestShortRunsAreNotListed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		delay time.Duration // before each of the echo's deltas
		// after: registerAfter of the test, far longer than the short
		// run on any box, far shorter than the long one.
		after  time.Duration
		listed bool
	}{
		{"short", 0, time.Hour, false},
		{"long", 500 * time.Millisecond, time.Millisecond, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, c, ctx := runMember(t, Config{DataDir: t.TempDir(), ScriptedDelay: tc.delay, registerAfter: tc.after})
			run, err := c.Send(ctx, "reg-"+tc.name, "hello there")
			if err != nil {
				t.Fatal(err)
			}
			seen := false
			for ev, err := range run.Events(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				if ev.Stream == "assistant" && !seen && tc.listed {
					// Mid-run, once the entry is due: listed.
					for !seen {
						list, err := m.Runs.List(ctx)
						if err != nil {
							t.Fatal(err)
						}
						seen = len(list) == 1 && list[0].RunID == run.ID
						if !seen {
							time.Sleep(10 * time.Millisecond)
						}
					}
				}
			}
			st, err := m.JS.Stream(ctx, "KV_runs")
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.listed && info.State.LastSeq != 0 {
				t.Errorf("a %v run wrote the registry %d times; want none", tc.delay, info.State.LastSeq)
			}
			if tc.listed && !seen {
				t.Error("a long run was never listed")
			}
			for tc.listed {
				// Cleared once it ended (in the background).
				list, err := m.Runs.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(list) == 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
