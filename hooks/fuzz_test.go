package hooks

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeReplies: no reply crashes the decoders, and what they accept
// keeps the bounds.
func FuzzDecodeReplies(f *testing.F) {
	for _, s := range []string{`{}`, `{"block":true,"blockReason":"no"}`, `{"params":{"a":[1,{"b":null}]}}`,
		`{"prependContext":"x","systemPrompt":"y"}`, `{"params":"x"}`, `[[[[[[`, `{"blockReason":"\ud800"}`, `{} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := decodeToolCallResult(data); err == nil {
			if len(r.BlockReason) > MaxReasonBytes || !utf8.ValidString(r.BlockReason) && utf8.ValidString(string(data)) {
				t.Fatalf("reason %q", r.BlockReason)
			}
		}
		if r, err := decodeStartResult(data); err == nil && (len(r.PrependContext) > MaxTextBytes || len(r.SystemPrompt) > MaxTextBytes) {
			t.Fatal("text over the bound")
		}
	})
}

func TestDepth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{{`{}`, 1}, {`{"a":"[[[["}`, 1}, {`{"a":"\"[[","b":[[]]}`, 3}, {strings.Repeat("[", 100), 100}} {
		if got := depth([]byte(tc.in)); got != tc.want {
			t.Errorf("depth(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
