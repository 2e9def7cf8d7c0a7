package bedrock

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// events are the ConverseStream event types the fast path reads.
var events = []string{"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}

// newTestParser returns a parser with a text block at wire index 0 and a
// tool call at wire index 1 open, as mid-stream.
func newTestParser() *parser {
	now := func() time.Time { return time.Unix(0, 0) }
	p := &parser{b: stream.NewBuilder(provider.Model{}, now(), nil), blocks: map[int]int{}, now: now}
	p.b.Append(p.open(0, false), "a")
	p.blocks[1] = p.b.BeginToolCall("t1", "read")
	return p
}

// FuzzFastMatchesEvent: whatever the fast path applies, decoding the
// event whole applies the same way (the same message, stop reason and
// usage); where they could differ (duplicate keys, escapes, numbers that
// are not plain integers, nested objects repeating a key) the fast path
// must step aside. Decoding refuses an event with any field of the wrong
// type, which fast, reading only its own fields, need not. messageStart is the one event fast accepts unread: its
// role is always the assistant's and the frame's CRC was checked.
func FuzzFastMatchesEvent(f *testing.F) {
	seeds := []struct {
		ev      int
		payload string
	}{
		{0, `{"role":"assistant"}`},
		{2, `{"contentBlockIndex":0,"delta":{"text":"Hello"}}`},
		{2, `{"delta":{"text":"wor\u006cd \"q\""},"contentBlockIndex":2}`},
		{2, `{"contentBlockIndex":0,"delta":{"text":"x"},"contentBlockIndex":1}`},
		{2, `{"contentBlockIndex":0,"delta":{"text":"x","text":"y"}}`},
		{2, `{"contentBlockIndex":1.5,"delta":{"text":"x"}}`},
		{2, `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"a\":"}}}`},
		{2, `{"contentBlockIndex":3,"delta":{"reasoningContent":{"text":"hmm"}}}`},
		{2, `{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"x"},"text":"y"}}`},
		{3, `{"contentBlockIndex":0}`},
		{3, `{"contentBlockIndex":7}`},
		{4, `{"stopReason":"end_turn"}`},
		{4, `{"stopReason":"tool_use","additionalModelResponseFields":{"stopReason":"x"}}`},
		{5, `{"usage":{"inputTokens":12,"outputTokens":3,"totalTokens":15},"metrics":{"latencyMs":100}}`},
		{5, `{"usage":{"inputTokens":12,"outputTokens":3,"cacheReadInputTokens":4,"cacheWriteInputTokens":5,"totalTokens":24}}`},
		{5, `{"usage":{"inputTokens":1e3,"outputTokens":3}}`},
		{1, `{"contentBlockIndex":2,"start":{"toolUse":{"toolUseId":"t2","name":"ls"}}}`},
		// What the fast path once applied differently (found by this fuzz):
		{3, `"contentBlockIndex":0`},                                // no object at all
		{5, `{"":{"inputTokens":0,"outputTokens":1}}`},              // usage keys outside the usage
		{2, `{"delta":{"text":"x","contentBlockIndex":3}}`},         // the index nested in the delta
		{4, `{"additionalModelResponseFields":{"stopReason":"x"}}`}, // a nested stop reason alone
	}
	for _, s := range seeds {
		f.Add(uint8(s.ev), s.payload)
	}
	f.Fuzz(func(t *testing.T, ev uint8, payload string) {
		name := []byte(events[int(ev)%len(events)])
		fast, whole := newTestParser(), newTestParser()
		if !fast.fast(name, []byte(payload)) {
			return // frame decodes it whole: the same code as below
		}
		err := whole.event(name, []byte(payload))
		if string(name) == "messageStart" {
			return
		}
		if err != nil {
			// Decoding refuses an event with a field of the wrong type
			// anywhere; fast reads only its own fields, which had the
			// right ones. Anything else refused is a disagreement.
			var typeErr *json.UnmarshalTypeError
			if errors.As(json.Unmarshal([]byte(payload), new(apiEvent)), &typeErr) {
				return
			}
			t.Fatalf("%s %s: fast applied what decoding refuses: %v", name, payload, err)
		}
		if fast.stop != whole.stop || fast.stopped != whole.stopped {
			t.Fatalf("%s %s: stop %q/%v, decoded %q/%v", name, payload, fast.stop, fast.stopped, whole.stop, whole.stopped)
		}
		if !reflect.DeepEqual(fast.blocks, whole.blocks) {
			t.Fatalf("%s %s: blocks %v, decoded %v", name, payload, fast.blocks, whole.blocks)
		}
		a, b := fast.b.Done(message.StopReason("stop")), whole.b.Done(message.StopReason("stop"))
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s %s:\nfast    %+v\ndecoded %+v", name, payload, a, b)
		}
	})
}
