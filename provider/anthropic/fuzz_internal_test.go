package anthropic

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// FuzzParser feeds arbitrary events to the parser: it may reject them,
// never panic.
func FuzzParser(f *testing.F) {
	f.Add("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{"a":1}}}`)
	f.Add("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}`)
	f.Add("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`)
	f.Add("error", `{"type":"error","error":{"type":"overloaded_error"}}`)
	f.Fuzz(func(t *testing.T, name, data string) {
		p := parser{b: stream.NewBuilder(provider.Model{}, time.Unix(0, 0), nil), blocks: map[int]int{}}
		_ = p.Event(sse.Event{Name: []byte("content_block_start"), Data: []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)})
		_ = p.Event(sse.Event{Name: []byte(name), Data: []byte(data)})
		p.b.Done("stop")
	})
}
