package fleet

import (
	"testing"

	"github.com/lanefleet/lanefleet/events"
)

// TestBlockRepliesAreOptIn: a worker publishes block reply events only when
// configured to (OpenClaw's block streaming is off by default); the reply's
// deltas and final come either way.
func TestBlockRepliesAreOptIn(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "default", true: "block-replies"}[on]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, c, ctx := runMember(t, Config{DataDir: t.TempDir(), BlockReplies: on})
			run, err := c.Send(ctx, "blocks-"+name, "hello there")
			if err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for ev, err := range run.Events(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				count[ev.Stream]++
			}
			if count[events.StreamAssistant] == 0 || count[events.StreamFinal] != 1 {
				t.Fatalf("events %v: want assistant deltas and one final", count)
			}
			if got := count[events.StreamBlock] > 0; got != on {
				t.Fatalf("block events %d with BlockReplies %v", count[events.StreamBlock], on)
			}
		})
	}
}
