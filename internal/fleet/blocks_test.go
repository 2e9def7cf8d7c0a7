package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
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
			m, err := startMember(t, Config{DataDir: t.TempDir(), BlockReplies: on})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			defer func() { cancel(); <-done }()
			c, err := lanefleet.New(m.Conn)
			if err != nil {
				t.Fatal(err)
			}
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
