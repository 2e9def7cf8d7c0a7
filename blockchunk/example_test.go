package blockchunk_test

import (
	"fmt"
	"time"

	"github.com/lanefleet/lanefleet/blockchunk"
)

// Streamed text goes into a Chunker; its blocks go through a Coalescer whose
// idle deadline the caller watches.
func Example() {
	c := blockchunk.New(blockchunk.Config{MinChars: 12, MaxChars: 40, BreakPreference: blockchunk.BreakSentence})
	co := blockchunk.NewCoalescer(blockchunk.CoalesceConfig{MinChars: 20, MaxChars: 80, Idle: time.Second, Joiner: " "})
	t0 := time.Unix(1750000000, 0)
	send := func(blocks []string) {
		for _, b := range blocks {
			fmt.Printf("send %q\n", b)
		}
	}
	for i, delta := range []string{"First sentence here. Sec", "ond one! And a third", " that ends."} {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		c.Append(delta)
		c.Drain(false, func(b string) {
			fmt.Printf("block %q\n", b)
			send(co.Add(b, now))
		})
	}
	c.Drain(true, func(b string) { send(co.Add(b, t0.Add(300*time.Millisecond))) })
	if at, ok := co.Deadline(); ok {
		send(co.Tick(at))
	}
	send(co.Flush())
	// Output:
	// block "First sentence here."
	// block "Second one! And a"
	// block "third that ends."
	// send "First sentence here. Second one! And a third that ends."
}
