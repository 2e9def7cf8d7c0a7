package fleet

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/kvstore"
)

// TestShortRunsAreNotListed: a run that ends within registerAfter never
// writes the active-run registry (two writes a turn saved); a longer one is
// listed while it runs and gone once it ends. The registry's own updates
// (a watch from before the send) say so, not polls.
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
		{"long", 200 * time.Millisecond, time.Millisecond, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, c, ctx := runMember(t, Config{DataDir: t.TempDir(), ScriptedDelay: tc.delay, registerAfter: tc.after})
			kv, err := m.JS.KeyValue(ctx, kvstore.DefaultRunsBucket)
			if err != nil {
				t.Fatal(err)
			}
			w, err := kv.WatchAll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Stop() }()
			for e := range w.Updates() { // nil: what the bucket held is read
				if e == nil {
					break
				}
			}
			run, err := c.Send(ctx, "reg-"+tc.name, "hello there")
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range run.Events(ctx) {
				if err != nil {
					t.Fatal(err)
				}
			}
			if !tc.listed {
				st, err := m.JS.Stream(ctx, "KV_"+kvstore.DefaultRunsBucket)
				if err != nil {
					t.Fatal(err)
				}
				info, err := st.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if info.State.LastSeq != 0 {
					t.Errorf("a %v run wrote the registry %d times; want none", tc.delay, info.State.LastSeq)
				}
				return
			}
			// Listed with this run, then cleared once it ended (in the
			// background: the watch waits for it).
			listed := false
			for e := range w.Updates() {
				if e.Operation() == jetstream.KeyValuePut {
					var info kvstore.RunInfo
					if err := json.Unmarshal(e.Value(), &info); err != nil {
						t.Fatal(err)
					}
					listed = listed || info.RunID == run.ID
					continue
				}
				if !listed {
					t.Fatalf("the entry %s was removed before the run was listed", e.Key())
				}
				return
			}
			t.Fatalf("the watch ended (%v) before the run's entry was listed and cleared (listed: %v)", ctx.Err(), listed)
		})
	}
}
