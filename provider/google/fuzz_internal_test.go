package google

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// FuzzParser feeds arbitrary chunks to the parser: it may reject them,
// never panic.
func FuzzParser(f *testing.F) {
	f.Add(`{"candidates":[{"content":{"parts":[{"text":"a","thought":true,"thoughtSignature":"x"},{"functionCall":{"name":"f","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1}}`)
	f.Add(`{"candidates": [{"content": {"parts": [{"text": "w"}]}}],"usageMetadata": {"promptTokenCount": 65}}`)
	f.Add(`{"error":{"code":429}}`)
	f.Fuzz(func(t *testing.T, data string) {
		p := parser{b: stream.NewBuilder(provider.Model{}, time.Unix(0, 0), nil), cur: -1, ids: map[string]bool{}}
		_ = p.Event(sse.Event{Data: []byte(data)})
		p.b.Done("stop")
	})
}

// FuzzFastMatchesChunk: whatever fastText applies, decoding the chunk
// whole applies the same way (the same message, usage, finish), mid-text
// and mid-thought; where they could differ (duplicate keys, escapes, keys
// nested elsewhere or spelled in another case, a second part or
// candidate) fastText must step aside. Decoding refuses a chunk with any
// field of the wrong type, which fastText, reading only its own fields,
// need not.
func FuzzFastMatchesChunk(f *testing.F) {
	for _, s := range []string{
		`{"candidates": [{"content": {"parts": [{"text": "w"}],"role":"model"},"index":0}],"usageMetadata": {"promptTokenCount": 65,"candidatesTokenCount":3,"totalTokenCount":68},"modelVersion":"gemini-2.5-flash","responseId":"r"}`,
		`{"candidates":[{"content":{"parts":[{"text":"a \"b\" \u00e9"}]}}]}`,
		`{"candidates":[{"content":{"parts":[{"text":"a"}]}},{"content":{"parts":[{"text":"b","thought":true}]}}]}`,
		// What fastText once applied differently (found by this fuzz):
		`{"candidates":[{"content":{"parts":[{"x":{"text":"a"}}]}}]}`,          // a text outside the part
		`{"candidates":[{"content":{"parts":[{"text":"a","Thought":true}]}}]}`, // a thought in another case
		`{"candidates":[{"content":{"parts":[{"text":"a"}]},"FinishReason":"STOP"}]}`,
		`{"usageMetadata":{"promptTokenCount":2},"x":{"usageMetadata":{"promptTokenCount":1}},"candidates":[{"content":{"parts":[{"text":"a"}]}}]}`,
		`{}`, // no candidates: a position that is none passed on (a panic)
	} {
		f.Add(true, s)
		f.Add(false, s)
	}
	f.Fuzz(func(t *testing.T, thinking bool, data string) {
		mk := func() *parser {
			p := &parser{b: stream.NewBuilder(provider.Model{}, time.Unix(0, 0), nil), cur: -1, ids: map[string]bool{}}
			kind := message.BlockText
			if thinking {
				kind = message.BlockThinking
			}
			p.b.Append(p.switchTo(kind), "x")
			return p
		}
		fast, whole := mk(), mk()
		if !fast.fastText([]byte(data)) {
			return // Event decodes it whole: the same code as below
		}
		if err := whole.decode([]byte(data)); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(json.Unmarshal([]byte(data), new(chunk)), &typeErr) {
				return
			}
			t.Fatalf("%s: fastText applied what decoding refuses: %v", data, err)
		}
		if fast.finish != whole.finish || fast.cur != whole.cur || fast.curKind != whole.curKind {
			t.Fatalf("%s: finish %q cur %d %s, decoded %q %d %s", data, fast.finish, fast.cur, fast.curKind, whole.finish, whole.cur, whole.curKind)
		}
		a, b := fast.b.Done(message.StopReason("stop")), whole.b.Done(message.StopReason("stop"))
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s:\nfast    %+v\ndecoded %+v", data, a, b)
		}
	})
}
