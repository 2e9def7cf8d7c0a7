package replytext_test

import (
	"fmt"

	"github.com/lanefleet/lanefleet/blockchunk"
	"github.com/lanefleet/lanefleet/replytext"
)

// How a runner turns one streamed assistant message into assistant
// updates, block replies and final payloads.
func Example() {
	var stream replytext.Stream
	var filter replytext.BlockFilter
	chunker := blockchunk.New(blockchunk.Config{MinChars: 20, MaxChars: 80})
	var blocks []string
	send := func(b string) {
		if out, ok := filter.Filter(b); ok {
			blocks = append(blocks, out)
			fmt.Printf("block %q\n", out)
		}
	}

	stream.Reset() // message_start
	for _, delta := range []string{"<think>plan it</think>Hello there. ", "Here is the ", "answer.\n\nBye!"} {
		chunk, _, up, ok := stream.Add(replytext.EventTextDelta, delta, "")
		if ok {
			fmt.Printf("assistant %q\n", up.Delta)
		}
		chunker.Append(chunk)
		chunker.Drain(false, send)
	}
	chunker.Drain(true, send) // text_end

	final := replytext.StripTags(stream.Raw(), false)
	fmt.Printf("final %q\n", final)
	for _, p := range replytext.BuildPayloads(replytext.PayloadInput{AssistantTexts: blocks}) {
		fmt.Printf("payload %q\n", p.Text)
	}
	// Output:
	// assistant "Hello there."
	// block "Hello there."
	// assistant " Here is the"
	// assistant " answer.\n\nBye!"
	// block "Here is the answer."
	// block "Bye!"
	// final "Hello there. Here is the answer.\n\nBye!"
	// payload "Hello there."
	// payload "Here is the answer."
	// payload "Bye!"
}
