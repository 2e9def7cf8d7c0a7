package sessionfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// stdParse is the reference: encoding/json with numbers normalised the way
// the message package does.
func stdParse(data []byte) (any, error) {
	if !json.Valid(data) {
		return nil, errInvalid
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return stdNormalize(v), nil
}

var errInvalid = errors.New("invalid JSON")

func stdNormalize(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, err := x.Float64()
		if err != nil {
			return x.String()
		}
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = stdNormalize(e)
		}
	case []any:
		for i, e := range x {
			x[i] = stdNormalize(e)
		}
	}
	return v
}

var jsonSeeds = []string{
	`{"a":1,"b":[1,2.5,-0,1e2,1E+400,-1e-400,12345678901234567890],"c":{"d":null,"e":true,"f":false}}`,
	`"\u00e9\ud83d\ude00\ud800x\udc00\\\/\b\f\n\r\t"`,
	"\"\xff\xfe ok \xe2\x82\"",
	`{"a":1,"a":2}`,
	` [ ] `, `{}`, `0`, `-`, `01`, `1.`, `.5`, `1e`, `[1,]`, `{"a"}`, `{"a":}`, `tru`, `nul`, `"\x"`, `"\u12"`,
	"\"a\tb\"", `[1 2]`, `{"a":1 "b":2}`, `"unterminated`, `{"a":[{"b":[{"c":"d"}]}]}`,
}

func TestParseJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	seeds := append([]string(nil), jsonSeeds...)
	if data, err := os.ReadFile("../message/testdata/session-v3.jsonl"); err == nil {
		seeds = append(seeds, strings.Split(string(data), "\n")...)
	}
	for _, s := range seeds {
		compareParsers(t, []byte(s))
	}
}

func compareParsers(t *testing.T, data []byte) {
	t.Helper()
	want, werr := stdParse(data)
	got, gerr := parseJSON(data)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: encoding/json err %v, parseJSON err %v", data, werr, gerr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nencoding/json %#v\nparseJSON     %#v", data, want, got)
	}
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		compareParsers(t, data)
	})
}
