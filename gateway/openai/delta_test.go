package openai

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// FuzzAppendJSONString checks appendJSONString writes what json.Marshal
// does, byte for byte.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "pong", `a"b\c`, "<script>&</script>", "tab\tnl\nret\rbs\bff\f", "\x00\x01\x1f\x7f",
		"caf\u00e9 \u2028 \u2029 \U0001F600", "bad \xff\xfe utf-8 \xe2\x82", "\ufffd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, json.Marshal = %s", s, got, want)
		}
	})
}

// TestDeltaChunkBytes checks that a delta's chunk written from the
// stream's frames has the bytes of the chunk marshalled whole (what the
// SDKs were tested against): for ids and models that need escaping, with
// and without include_usage, text and reasoning, a new item's separator.
func TestDeltaChunkBytes(t *testing.T) {
	t.Parallel()
	parts := []part{
		{kind: kindText, start: true, delta: "hello <b>&</b> \"world\"\n"},
		{kind: kindText, delta: "more \u2028 \xff"},
		{kind: kindReasoning, start: true, delta: "think"},
		{kind: kindReasoning, delta: ""},
		{kind: kindText, start: true, delta: "after a tool round"},
	}
	for _, c := range []struct {
		name, id, model string
		usage           bool
	}{
		{"plain", "chatcmpl-abc", "fast", false},
		{"usage", "chatcmpl-abc", "fast", true},
		{"escapes", `chatcmpl-"delta":{}`, "m<o>&d\u2028el\"delta\":{}", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			whole := chatOut{id: c.id, model: c.model, created: 1700000000, includeUsage: c.usage}
			framed := whole
			framed.frames()
			var want strings.Builder
			rec := httptest.NewRecorder()
			s := newSSE(rec, time.Minute)
			for _, pt := range parts {
				b, err := json.Marshal(whole.chunk(whole.add(pt), nil))
				if err != nil {
					t.Fatal(err)
				}
				want.Write(frame("", b))
				if err := s.delta(&framed, pt); err != nil {
					t.Fatal(err)
				}
			}
			s.end()
			if got := rec.Body.String(); got != want.String() {
				t.Fatalf("framed chunks:\n%s\nmarshalled:\n%s", got, want.String())
			}
			if framed.content.String() != whole.content.String() || framed.reasoning.String() != whole.reasoning.String() {
				t.Fatalf("collected output differs: %q/%q against %q/%q", framed.content.String(), framed.reasoning.String(), whole.content.String(), whole.reasoning.String())
			}
		})
	}
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

// BenchmarkChatDelta is the per-delta path of a streamed chat completion:
// a text delta's chunk encoded and written, flushed every fourth delta
// (events that came together go out together). "marshal" is the chunk
// marshalled whole (as before the frames), "frames" the stream's frames.
func BenchmarkChatDelta(b *testing.B) {
	pt := part{kind: kindText, delta: "a token or two"}
	for _, how := range []string{"marshal", "frames"} {
		b.Run(how, func(b *testing.B) {
			c := chatOut{id: "chatcmpl-0123456789abcdef", model: "fast", created: 1700000000, includeUsage: true}
			c.frames()
			s := newSSE(&discard{h: http.Header{}}, time.Minute)
			if err := s.open(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c.content.Reset()
				var err error
				if how == "marshal" {
					err = s.chunk(c.chunk(c.add(pt), nil))
				} else {
					err = s.delta(&c, pt)
				}
				if err != nil {
					b.Fatal(err)
				}
				if i%4 == 3 {
					_ = s.flush()
				}
			}
		})
	}
}

// add takes a part and returns the chunk delta that sends it: the chunk
// marshalled whole that delta's bytes are checked against.
func (c *chatOut) add(pt part) chatDelta {
	d := c.addDelta(pt)
	if pt.kind == kindReasoning {
		return chatDelta{ReasoningContent: &d}
	}
	return chatDelta{Content: &d}
}
