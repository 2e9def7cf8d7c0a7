package jsonfast_test

import (
	"encoding/json"
	"testing"

	"github.com/lanefleet/lanefleet/provider/internal/jsonfast"
)

func TestStr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		data, key, want string
		ok              bool
	}{
		{`{"type":"x","delta":{"type":"text_delta","text":"hi"}}`, "text", "hi", true},
		{`{"delta":{"text": "a\"b\\n\u00e9"}   }`, "text", "a\"b\\n\u00e9", true},
		{`{"text":"say \"text\":\"no\""}`, "text", `say "text":"no"`, true},
		{`{"text":"a","x":{"text":"b"}}`, "text", "", false},
		{`{"text":null}`, "text", "", false},
		{`{"text":"unterminated`, "text", "", false},
		{`{"other":"x"}`, "text", "", false},
	} {
		got, ok := jsonfast.Str([]byte(tc.data), tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %q %v", tc.data, got, ok)
		}
	}
	if n, ok := jsonfast.Int([]byte(`{"index": 12,"x":1}`), "index"); n != 12 || !ok {
		t.Errorf("int %d %v", n, ok)
	}
	// encoding/json refuses these for an integer field: Int must not
	// read them as their leading digits.
	for _, data := range []string{`{"index":12.5}`, `{"index":1e3}`, `{"index":2E1,"x":1}`, `{"index":7x}`} {
		if n, ok := jsonfast.Int([]byte(data), "index"); ok {
			t.Errorf("%s: int %d", data, n)
		}
	}
	if n, ok := jsonfast.Int([]byte(`{"x":{"index":3}}`), "index"); n != 3 || !ok {
		t.Errorf("int %d %v", n, ok)
	}
}

// FuzzStr checks Str never disagrees with encoding/json when it answers.
func FuzzStr(f *testing.F) {
	f.Add(`{"text":"a\"b"}`)
	f.Add(`{"text":"\ud83d\ude00"}`)
	f.Fuzz(func(t *testing.T, data string) {
		got, ok := jsonfast.Str([]byte(data), "text")
		if !ok {
			return
		}
		var m map[string]any
		if json.Unmarshal([]byte(data), &m) != nil {
			return
		}
		if s, isStr := m["text"].(string); isStr && s != got {
			t.Errorf("%q: fast %q, json %q", data, got, s)
		}
	})
}
