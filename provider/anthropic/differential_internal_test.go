package anthropic

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

// newTestParser returns a parser mid-stream: a text block at wire index
// 0, a thinking block at 1 and a tool call at 2, open.
func newTestParser() *parser {
	p := &parser{b: stream.NewBuilder(provider.Model{}, time.Unix(0, 0), nil), blocks: map[int]int{}}
	p.blocks[0] = p.b.BeginText()
	p.blocks[1] = p.b.BeginThinking()
	p.blocks[2] = p.b.BeginToolCall("t1", "read")
	return p
}

// FuzzFastMatchesEvent: whatever the fast path applies to a
// content_block_delta, the full decoder applies the same way; where they
// could differ (duplicate keys, escapes, nested objects repeating a key,
// numbers that are not plain integers) the fast path must step aside.
// The decoder refuses an event with any field of the wrong type, which
// the fast path, reading only its own fields, need not.
func FuzzFastMatchesEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hmm \"q\""}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"c2ln"}}`,
		// What the fast path once applied differently (found by this fuzz):
		`{"index":0,"delta":{"type":"text_delta","x":1},"extra":{"text":"z"}}`, // the text outside the delta
		`{"index":0,"delta":{"type":"text_delta","text":"a"},"x":{"index":1}}`, // the index nested
		`{"index":0,"delta":{"type":"thinking_delta","text":"a","thinking":"b","type2":"text_delta"}}`,
		`"index":0,"type":"text_delta","text":"a"`, // no object at all
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		fast, whole := newTestParser(), newTestParser()
		if !fast.fastDelta([]byte(data)) {
			return // Event decodes it whole: the same code as below
		}
		var e event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				return
			}
			t.Fatalf("%s: fast applied what decoding refuses: %v", data, err)
		}
		if err := whole.blockDelta(&e); err != nil {
			t.Fatalf("%s: fast applied what the decoder refuses: %v", data, err)
		}
		a, b := fast.b.Done(message.StopReason("stop")), whole.b.Done(message.StopReason("stop"))
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s:\nfast    %+v\ndecoded %+v", data, a, b)
		}
	})
}
