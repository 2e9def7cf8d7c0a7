package jsonfast_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/provider/internal/jsonfast"
)

// at follows path through data with Members and Element ("[n]" is an
// array's nth element), returning the last position.
func at(data []byte, path ...string) int {
	j := 0
	for _, k := range path {
		if n, err := strconv.Atoi(strings.Trim(k, "[]")); err == nil && strings.HasPrefix(k, "[") {
			j = jsonfast.Element(data, j, n)
			continue
		}
		var pos [1]int
		if !jsonfast.Members(data, j, []string{k}, pos[:]) {
			return -1
		}
		j = pos[0]
	}
	return j
}

func TestMembers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		data string
		path []string
		want string
		ok   bool
	}{
		{`{"contentBlockIndex":0,"delta":{"text":"hi"}}`, []string{"delta", "text"}, "hi", true},
		{` { "delta" : { "x" : [1, {"text":"no"}], "text" : "a\"b" } } `, []string{"delta", "text"}, `a"b`, true},
		{`{"x":{"delta":{"text":"nested"}},"delta":{"text":"top"}}`, []string{"delta", "text"}, "top", true},
		{`{"delta":{"text":"a"},"delta":{"text":"b"}}`, []string{"delta", "text"}, "", false},
		{`{"delta":{"text":"a","Text":"b"}}`, []string{"delta", "text"}, "", false},
		{`{"delta":{"Text":"b"}}`, []string{"delta", "text"}, "", false},
		{`{"delta":{"te\u0078t":"b"}}`, []string{"delta", "text"}, "", false},
		{`{"delta":"text"}`, []string{"delta", "text"}, "", false},
		{`{"delta":{}}`, []string{"delta", "text"}, "", false},
		{`{"s":"}\"delta\":{","delta":{"text":"ok"}}`, []string{"delta", "text"}, "ok", true},
		{`[{"delta":{"text":"a"}}]`, []string{"delta", "text"}, "", false},
		{`{"c":[{"p":[{"text":"a"}]},{"x":1}]}`, []string{"c", "[0]", "p", "[0]", "text"}, "a", true},
		{`{"c":[ {"x":[1,{"text":"n"}]} , {"text":"b"} ]}`, []string{"c", "[1]", "text"}, "b", true},
		{`{"c":[]}`, []string{"c", "[0]", "text"}, "", false},
		{`{"c":{"text":"a"}}`, []string{"c", "[0]", "text"}, "", false},
	} {
		got, ok := jsonfast.StrIn([]byte(tc.data), at([]byte(tc.data), tc.path...))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s %v: got %q %v", tc.data, tc.path, got, ok)
		}
	}
	for _, tc := range []struct {
		data string
		path []string
		want int
	}{
		{`{"c":[1]}`, []string{"c", "[1]"}, jsonfast.Missing},
		{`{"c":[]}`, []string{"c", "[0]"}, jsonfast.Missing},
		{`{"a":{}}`, []string{"a", "b"}, jsonfast.Missing},
		{`{"a":{"B":1}}`, []string{"a", "b"}, -1},
		{`{"a":1}`, []string{"a", "b"}, -1},
		{`{}`, []string{"a", "b"}, -1},
		{`{"x":{"index":3},"index":4}`, []string{"index"}, 25},
	} {
		if got := at([]byte(tc.data), tc.path...); got != tc.want {
			t.Errorf("%s %v: position %d, want %d", tc.data, tc.path, got, tc.want)
		}
	}
	if n, ok := jsonfast.IntIn([]byte(`{}`), jsonfast.Missing); n != 0 || !ok {
		t.Errorf("a missing integer: %d %v", n, ok)
	}
	if _, ok := jsonfast.IntIn([]byte(`{"index":1.5}`), 9); ok {
		t.Error("a fraction read as an integer")
	}
}

// TestValues: StrIn and IntIn read what encoding/json would, or say they
// are not sure.
func TestValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value, want string
		ok          bool
	}{
		{`"hi"`, "hi", true},
		{`"a\"b\\n\u00e9"`, "a\"b\\n\u00e9", true},
		{`"say \"text\":\"no\""`, `say "text":"no"`, true},
		{`null`, "", false},
		{`12`, "", false},
	} {
		got, ok := jsonfast.StrIn([]byte(tc.value), 0)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %q %v", tc.value, got, ok)
		}
	}
	// encoding/json refuses these for an integer field: IntIn must not
	// read them as their leading digits.
	for _, v := range []string{`12.5`, `1e3`, `2E1,`, `"3"`, `null`} {
		if n, ok := jsonfast.IntIn([]byte(v), 0); ok {
			t.Errorf("%s: int %d", v, n)
		}
	}
	if n, ok := jsonfast.IntIn([]byte(`-12}`), 0); n != -12 || !ok {
		t.Errorf("int %d %v", n, ok)
	}
}

// FuzzMembers checks what Members and Element find never disagrees with
// encoding/json, on valid JSON.
func FuzzMembers(f *testing.F) {
	f.Add(`{"delta":{"text":"a\"b"},"index":1}`)
	f.Add(`{"x":[{"delta":{"text":"n"}}],"delta":{"text":"t","index":-2},"index":0}`)
	f.Add(`{"c":[{"text":"a","x":[{"text":"b"}]},2],"index":1}`)
	f.Fuzz(func(t *testing.T, data string) {
		var m map[string]any
		if !json.Valid([]byte(data)) || json.Unmarshal([]byte(data), &m) != nil {
			return
		}
		b := []byte(data)
		if arr, isArr := m["c"].([]any); isArr && len(arr) > 0 {
			first, _ := arr[0].(map[string]any)
			if got, ok := jsonfast.StrIn(b, at(b, "c", "[0]", "text")); ok {
				if s, isStr := first["text"].(string); !isStr || s != got {
					t.Errorf("%q: fast %q, json %v", data, got, first["text"])
				}
			}
		} else if at(b, "c", "[0]") >= 0 {
			t.Errorf("%q: an element of no array, or of an empty one", data)
		}
		inner, _ := m["delta"].(map[string]any)
		if got, ok := jsonfast.StrIn(b, at(b, "delta", "text")); ok {
			if s, isStr := inner["text"].(string); !isStr || s != got {
				t.Errorf("%q: fast %q, json %v", data, got, inner["text"])
			}
		}
		if j := at(b, "index"); j >= 0 {
			got, ok := jsonfast.IntIn(b, j)
			if n, isNum := m["index"].(float64); ok && (!isNum || n != float64(got)) {
				t.Errorf("%q: fast %d, json %v", data, got, m["index"])
			}
		} else if _, has := m["index"]; j == jsonfast.Missing && has {
			t.Errorf("%q: index missing, json has it", data)
		}
	})
}

// FuzzValid holds Valid to encoding/json's (Valid may say false where
// the nesting is deeper than it tracks).
func FuzzValid(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,-2.5e+3,true,false,null,"x\u00e9\n"],"b":{}}`, ` [ {"a" : 0 } ] `,
		`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `"\x"`, `nul`, `{"a":1}}`, `{"a":"\ud800"}`, "\"\x01\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		fast, std := jsonfast.Valid([]byte(data)), json.Valid([]byte(data))
		if fast && !std {
			t.Fatalf("%q: Valid says valid, encoding/json not", data)
		}
		if !fast && std && !deep([]byte(data)) {
			t.Fatalf("%q: Valid says not valid, encoding/json valid", data)
		}
	})
}

// deep reports whether data nests more than 32 containers (outside strings, roughly).
func deep(data []byte) bool {
	n, max := 0, 0
	for _, c := range data {
		switch c {
		case '{', '[':
			n++
		case '}', ']':
			n--
		}
		if n > max {
			max = n
		}
	}
	return max > 32
}

// BenchmarkDelta reads a Bedrock text delta's two fields (with its
// padding) as the fast paths do, against encoding/json's Valid alone.
func BenchmarkDelta(b *testing.B) {
	data := []byte(`{"contentBlockIndex":0,"delta":{"text":"word123 "},"p":"abcdefghijklmnopqrstuvwxy"}`)
	b.Run("members", func(b *testing.B) {
		top, delta := []string{"contentBlockIndex", "delta"}, []string{"text"}
		for b.Loop() {
			var tp [2]int
			var dp [1]int
			if !jsonfast.Valid(data) || !jsonfast.Members(data, 0, top, tp[:]) || !jsonfast.Members(data, tp[1], delta, dp[:]) {
				b.Fatal("not read")
			}
			_, ok1 := jsonfast.IntIn(data, tp[0])
			_, ok2 := jsonfast.StrIn(data, dp[0])
			if !ok1 || !ok2 {
				b.Fatal("not read")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		for b.Loop() {
			if !json.Valid(data) {
				b.Fatal("not valid")
			}
		}
	})
}
