package openai

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// FuzzParsers feeds arbitrary event data to both parsers: they may reject
// it, never panic.
func FuzzParsers(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"delta":{"content":"a","tool_calls":[{"index":0,"id":"x","function":{"arguments":"{"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`,
		`{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.encrypted","id":"x"}]}}]}`,
		`{"type":"response.output_item.added","output_index":3,"item":{"type":"function_call","call_id":"c","id":"i"}}`,
		`{"type":"response.output_item.done","output_index":3,"item":{"type":"reasoning"}}`,
		`{"type":"response.failed","response":{"error":{"code":"x"}}}`,
	} {
		f.Add("", s)
		f.Add("response.output_text.delta", s)
	}
	f.Fuzz(func(t *testing.T, name, data string) {
		m := provider.Model{ID: "m"}
		cp := chatParser{b: stream.NewBuilder(m, time.Unix(0, 0), nil), toolIdx: map[int]int{}, cur: -1}
		_ = cp.Event(sse.Event{Name: []byte(name), Data: []byte(data)})
		cp.attachReasoningDetails()
		_, _ = cp.stopReason()
		rp := respParser{b: stream.NewBuilder(m, time.Unix(0, 0), nil), items: map[int]int{}, parts: map[int]int{}}
		_ = rp.Event(sse.Event{Name: []byte(name), Data: []byte(data)})
		rp.b.Done("stop")
	})
}
