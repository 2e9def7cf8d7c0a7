package ecmatext

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestAppendJSON(t *testing.T) {
	t.Parallel()
	ordered := &Object{}
	for _, kv := range []struct {
		k string
		v any
	}{{"b", 1.0}, {"2", 2.0}, {"10", 3.0}, {"1", 4.0}, {"01", 5.0}, {"a", 6.0}, {"4294967294", 7.0}, {"4294967295", 8.0}, {"-1", 9.0}, {"b", 10.0}} {
		ordered.Set(kv.k, kv.v)
	}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"null", nil, `null`},
		{"bools", []any{true, false}, `[true,false]`},
		// No HTML escaping, U+2028 kept, controls escaped the short way
		// where there is one.
		{"string", "é/<&>\u0001\"\\\n\u2028\t", "\"é/<&>\\u0001\\\"\\\\\\n\u2028\\t\""},
		// A lone surrogate a decoder kept as WTF-8.
		{"lone surrogate", "a\xed\xa0\x80b", `"a\ud800b"`},
		// Numbers as Number.prototype.toString spells the double.
		{"numbers", []any{5e-324, 0.1, 1e21, 1e20, 123e-20, math.Copysign(0, -1), 1.5e300, 100.0, -2.5}, `[5e-324,0.1,1e+21,100000000000000000000,1.23e-18,0,1.5e+300,100,-2.5]`},
		{"non-finite", []any{math.Inf(1), math.NaN()}, `[null,null]`},
		{"integers", []any{42, int64(-7), int64(1) << 60}, `[42,-7,1152921504606847000]`},
		{"literals", []any{json.Number("1e400"), Number("1e-400"), Number("1.0"), Number("12345678901234567890")}, `[null,0,1,12345678901234567000]`},
		// A map has no order left: keys sorted.
		{"map", map[string]any{"b": 1.0, "a": map[string]any{}, "c": []any{}}, `{"a":{},"b":1,"c":[]}`},
		// An Object keeps JavaScript's order: array indexes first,
		// ascending, then the rest as they came; a repeated key keeps its
		// place and takes the last value.
		{"object order", ordered, `{"1":4,"2":2,"10":3,"4294967294":7,"b":10,"01":5,"a":6,"4294967295":8,"-1":9}`},
		{"empty object", &Object{}, `{}`},
		// Other values through encoding/json, then the same rules.
		{"struct", struct {
			A string `json:"a"`
			N int    `json:"n"`
		}{"<\u2028>", 3}, "{\"a\":\"<\u2028>\",\"n\":3}"},
		{"unmarshalable", func() {}, `null`},
	}
	for _, tt := range tests {
		if got := string(AppendJSON(nil, tt.in)); got != tt.want {
			t.Errorf("%s: AppendJSON = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// FuzzAppendJSON: whatever encoding/json reads, AppendJSON writes back as
// valid JSON with the same value.
func FuzzAppendJSON(f *testing.F) {
	for _, s := range []string{`null`, `[1,"a",true,{"b":[]}]`, `{"x":"\u2028<&>","y":1e21,"z":-0.0}`, `"\ud800"`, `{"2":1,"1":0}`, `[5e-324,123e-20]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			return
		}
		out := AppendJSON(nil, v)
		var back any
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("AppendJSON(%s) = %s: not JSON: %v", data, out, err)
		}
		if !reflect.DeepEqual(v, back) {
			t.Fatalf("AppendJSON(%s) = %s reads back as %#v, want %#v", data, out, back, v)
		}
	})
}
