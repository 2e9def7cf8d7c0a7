package openai

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

// FuzzFastMatchesChunk: whatever the Chat Completions fast path applies,
// decoding the chunk whole applies the same way, mid-text and
// mid-reasoning; where they could differ (duplicate keys, escapes, keys
// nested elsewhere or spelled in another case, a second choice) the fast
// path must step aside. Decoding refuses a chunk with any field of the
// wrong type, which the fast path, reading only its own fields, need not.
func FuzzFastMatchesChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"word "},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"cw1RS"}`,
		`{"choices":[{"delta":{"role":"assistant","content":"","refusal":null}}],"x_groq":{"id":"req_1"}}`,
		`{"choices":[{"delta":{"content":"a \"b\" \u00e9","reasoning_content":null}}]}`,
		// Chunks the fast path must step aside for; the first it once
		// applied as text, though the delta had none.
		`{"choices":[{"delta":{"x":{"content":"a"}}}]}`,
		`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}`,
		`{"choices":[{"delta":{"content":"a","Tool_Calls":[{"index":0,"id":"t","function":{"name":"f"}}]}}]}`,
		`{"choices":[{"delta":{"content":"a"},"Finish_Reason":"stop"}]}`,
		`{"choices":[{"delta":{"content":"a"}}],"x_groq":{"usage":{"prompt_tokens":3}}}`,
		`{}`,
	} {
		f.Add(false, s)
		f.Add(true, s)
	}
	f.Fuzz(func(t *testing.T, reasoning bool, data string) {
		mk := func() *chatParser {
			p := &chatParser{b: stream.NewBuilder(provider.Model{}, time.Unix(0, 0), nil), toolIdx: map[int]int{}, cur: -1}
			kind := message.BlockText
			if reasoning {
				kind = message.BlockThinking
			}
			p.b.Append(p.switchTo(kind), "x")
			return p
		}
		fast, whole := mk(), mk()
		if !fast.fastContent([]byte(data)) {
			return // Event decodes it whole: the same code as below
		}
		if err := whole.decode([]byte(data)); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(json.Unmarshal([]byte(data), new(chatChunk)), &typeErr) {
				return
			}
			t.Fatalf("%s: the fast path applied what decoding refuses: %v", data, err)
		}
		if fast.finish != whole.finish || fast.cur != whole.cur || fast.curKind != whole.curKind || len(fast.details) != len(whole.details) {
			t.Fatalf("%s: finish %q cur %d %s, decoded %q %d %s", data, fast.finish, fast.cur, fast.curKind, whole.finish, whole.cur, whole.curKind)
		}
		a, b := fast.b.Done(message.StopReason("stop")), whole.b.Done(message.StopReason("stop"))
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s:\nfast    %+v\ndecoded %+v", data, a, b)
		}
	})
}

// FuzzFastMatchesEvent: the Responses fast path against decoding the
// delta event whole, as FuzzFastMatchesChunk.
func FuzzFastMatchesEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hello","logprobs":[],"obfuscation":"x"}`,
		`{"type":"response.reasoning_summary_text.delta","output_index":0,"summary_index":0,"delta":"think \"q\""}`,
		// Events the fast path must step aside for; the last two it once
		// applied (a nested delta where the decoder reads "Delta"; no
		// object at all).
		`{"output_index":0,"x":{"delta":"a"},"delta":""}`,
		`{"output_index":1,"logprobs":[{"delta":"a"}],"Delta":"b"}`,
		`"output_index":0,"delta":"a"`,
	} {
		f.Add(false, s)
		f.Add(true, s)
	}
	f.Fuzz(func(t *testing.T, summary bool, data string) {
		name := "response.output_text.delta"
		if summary {
			name = "response.reasoning_summary_text.delta"
		}
		mk := func() *respParser {
			p := &respParser{b: stream.NewBuilder(provider.Model{}, time.Unix(0, 0), nil), items: map[int]int{}, parts: map[int]int{}}
			p.b.Append(p.block(0, message.BlockText), "x")
			p.b.Append(p.block(1, message.BlockThinking), "y")
			return p
		}
		fast, whole := mk(), mk()
		if !fast.fastDelta(name, []byte(data)) {
			return
		}
		matchesDecoded(t, name, data, fast, whole)
	})
}

// FuzzFastMatchesOther: fastOther against decoding the event whole, for
// response.completed (usage, service tier, the stop) and an ignored
// event, as FuzzFastMatchesChunk; the first seeds are the real events'
// shape, the rest ones it must step aside for.
func FuzzFastMatchesOther(f *testing.F) {
	for _, s := range []string{
		`{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"service_tier":"default","usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":1024},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1205}}}`,
		`{"type":"response.completed","response":{"status":"completed","service_tier":"flex","usage":{"input_tokens":1000000,"output_tokens":0,"total_tokens":1000000}}}`,
		`{"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null,"tools":[{"type":"function","name":"f","parameters":{}}]}}`,
		`{"response":{"usage":{"input_tokens":3},"Usage":{"input_tokens":4}}}`,
		`{"response":{"usage":{"input_tokens":3}},"Response":null}`,
		`{"response":null}`,
		`{"response":{"service_tier":null,"usage":{"input_tokens":"3"}}}`,
		`{"response":{"service_tier":"fl\u0065x","usage":{"input_tokens":2}}}`,
		`{"response":{"\u0075sage":{"input_tokens":2}}}`,
		`[]`,
		`{}`,
	} {
		f.Add(false, s)
		f.Add(true, s)
	}
	f.Fuzz(func(t *testing.T, ignored bool, data string) {
		name := "response.completed"
		if ignored {
			name = "response.created"
		}
		mk := func() *respParser {
			p := &respParser{b: stream.NewBuilder(provider.Model{Cost: provider.ModelCost{Input: 1.25, Output: 10, CacheRead: 0.125}}, time.Unix(0, 0), nil), items: map[int]int{}, parts: map[int]int{}}
			p.b.Append(p.block(0, message.BlockText), "x")
			return p
		}
		fast, whole := mk(), mk()
		if !fast.fastOther(name, []byte(data)) {
			return
		}
		matchesDecoded(t, name, data, fast, whole)
	})
}

// matchesDecoded decodes data whole into whole and fails t unless it
// leaves whole as the fast path left fast: the same blocks, items and
// stop. Decoding may refuse an event for a field of the wrong type that
// the fast path does not read; nothing else.
func matchesDecoded(t *testing.T, name, data string, fast, whole *respParser) {
	t.Helper()
	if err := whole.decode(name, []byte(data)); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(json.Unmarshal([]byte(data), new(respEvent)), &typeErr) {
			return
		}
		t.Fatalf("%s: the fast path applied what decoding refuses: %v", data, err)
	}
	if !reflect.DeepEqual(fast.items, whole.items) || fast.stop != whole.stop {
		t.Fatalf("%s: items %v stop %q, decoded %v %q", data, fast.items, fast.stop, whole.items, whole.stop)
	}
	a, b := fast.b.Done(message.StopReason("stop")), whole.b.Done(message.StopReason("stop"))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%s:\nfast    %+v\ndecoded %+v", data, a, b)
	}
}
