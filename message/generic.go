package message

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/vmihailenco/msgpack/v5"
)

// obj is the generic form every type of this package passes through when it is
// encoded or decoded, so that JSON and msgpack share one field mapping and
// unknown fields are kept.
type obj = map[string]any

// decodeJSONObject decodes one JSON object with numbers normalised to int64
// when integral and float64 otherwise.
func decodeJSONObject(data []byte) (obj, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after JSON object")
	}
	m, ok := normalize(v).(obj)
	if !ok {
		return nil, fmt.Errorf("expected a JSON object, got %s", kindOf(v))
	}
	return m, nil
}

// normalize converts json.Number values and msgpack integer types into int64
// or float64 and map[any]any into map[string]any, recursively.
func normalize(v any) any {
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
			x[k] = normalize(e)
		}
		return x
	case map[any]any:
		m := make(obj, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = normalize(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		if x > math.MaxInt64 {
			return float64(x)
		}
		return int64(x)
	case uint:
		return int64(x)
	case float32:
		return float64(x)
	default:
		return v
	}
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case int64, float64, json.Number:
		return "number"
	case []any:
		return "array"
	case obj:
		return "object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// FieldError reports a field of the wrong type.
type FieldError struct {
	Field string // dotted path of the field
	Want  string // the JSON kind expected
	Got   string // the JSON kind found
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("message: field %q: want %s, got %s", e.Field, e.Want, e.Got)
}

// reader pulls typed fields out of an obj, deleting what it consumes so that
// what is left is the set of unknown fields.
type reader struct {
	m    obj
	path string
	err  error
}

func (r *reader) fail(field, want string, got any) {
	if r.err == nil {
		p := field
		if r.path != "" {
			p = r.path + "." + field
		}
		r.err = &FieldError{Field: p, Want: want, Got: kindOf(got)}
	}
}

func (r *reader) take(field string) (any, bool) {
	v, ok := r.m[field]
	if ok {
		delete(r.m, field)
	}
	return v, ok
}

func (r *reader) str(field string) string {
	v, ok := r.take(field)
	if !ok || v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.fail(field, "string", v)
	}
	return s
}

// optStr takes field when it is a string and leaves any other value in place,
// so that it ends up among the unknown fields.
func (r *reader) optStr(field string) string {
	if s, ok := r.m[field].(string); ok {
		delete(r.m, field)
		return s
	}
	return ""
}

func (r *reader) boolean(field string) bool {
	v, ok := r.take(field)
	if !ok || v == nil {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		r.fail(field, "boolean", v)
	}
	return b
}

func (r *reader) int(field string) int64 {
	v, ok := r.take(field)
	if !ok || v == nil {
		return 0
	}
	n, ok := toInt(v)
	if !ok {
		r.fail(field, "integer", v)
	}
	return n
}

func (r *reader) float(field string) float64 {
	v, ok := r.take(field)
	if !ok || v == nil {
		return 0
	}
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	}
	r.fail(field, "number", v)
	return 0
}

func (r *reader) object(field string) (obj, bool) {
	v, ok := r.take(field)
	if !ok || v == nil {
		return nil, false
	}
	m, ok := v.(obj)
	if !ok {
		r.fail(field, "object", v)
		return nil, false
	}
	return m, true
}

// rest returns the unknown fields, or nil when there are none.
func (r *reader) rest() map[string]any {
	if len(r.m) == 0 {
		return nil
	}
	return r.m
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return int64(x), true
		}
	}
	return 0, false
}

// putExtra copies unknown fields into m without overwriting known ones.
func putExtra(m obj, extra map[string]any) {
	for k, v := range extra {
		if _, known := m[k]; !known {
			m[k] = v
		}
	}
}

func cloneAny(v any) any {
	switch x := v.(type) {
	case obj:
		m := make(obj, len(x))
		for k, e := range x {
			m[k] = cloneAny(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = cloneAny(e)
		}
		return s
	default:
		return v
	}
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return cloneAny(m).(obj)
}

// encodeMsgpackObj writes m with sorted keys so equal values encode to equal bytes.
func encodeMsgpackObj(enc *msgpack.Encoder, m obj) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if err := enc.EncodeMapLen(len(keys)); err != nil {
		return err
	}
	for _, k := range keys {
		if err := enc.EncodeString(k); err != nil {
			return err
		}
		if err := enc.Encode(m[k]); err != nil {
			return err
		}
	}
	return nil
}

func decodeMsgpackObj(dec *msgpack.Decoder) (obj, error) {
	v, err := dec.DecodeInterfaceLoose()
	if err != nil {
		return nil, err
	}
	m, ok := normalize(v).(obj)
	if !ok {
		return nil, fmt.Errorf("expected a msgpack map, got %s", kindOf(normalize(v)))
	}
	return m, nil
}
