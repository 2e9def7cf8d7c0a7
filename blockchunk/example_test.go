package blockchunk_test

import (
	"fmt"

	"github.com/lanefleet/lanefleet/blockchunk"
)

// Streamed text goes into a Chunker; each drain after a delta sends the
// blocks that are ready, and a forced drain at the end of the text sends the
// rest.
func Example() {
	c := blockchunk.New(blockchunk.Config{MinChars: 12, MaxChars: 40, BreakPreference: blockchunk.BreakSentence})
	send := func(b string) { fmt.Printf("block %q\n", b) }
	for _, delta := range []string{"First sentence here. Sec", "ond one! And a third", " that ends."} {
		c.Append(delta)
		c.Drain(false, send)
	}
	c.Drain(true, send)
	// Output:
	// block "First sentence here."
	// block "Second one! And a"
	// block "third that ends."
}
