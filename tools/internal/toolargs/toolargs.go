// Package toolargs decodes a tool call's arguments for every built-in tool
// (tools, tools/webfetch, tools/websearch): lenient where models commonly
// slip (numbers sent as strings, integral floats, explicit nulls) and
// strict otherwise, with errors that name the argument and what was
// expected.
package toolargs

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// kind names the JSON kind of v for error messages.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case json.Number, float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// String returns the string argument key. A missing or null argument is
// an error when required and "" otherwise.
func String(args map[string]any, key string, required bool) (string, bool, error) {
	v, ok := args[key]
	if !ok || v == nil {
		if required {
			return "", false, fmt.Errorf("missing required argument %q (a string)", key)
		}
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, fmt.Errorf("argument %q must be a string, got %s", key, kind(v))
	}
	return s, true, nil
}

// Number returns the optional number argument key. Numeric strings are
// accepted; NaN and infinities are not.
func Number(args map[string]any, key string) (float64, bool, error) {
	v, ok := args[key]
	if !ok || v == nil {
		return 0, false, nil
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case json.Number:
		var err error
		if f, err = strconv.ParseFloat(string(x), 64); err != nil {
			return 0, false, fmt.Errorf("argument %q must be a number, got %q", key, string(x))
		}
	case string:
		s := strings.TrimSpace(x)
		if s == "" {
			return 0, false, nil
		}
		var err error
		if f, err = strconv.ParseFloat(s, 64); err != nil {
			return 0, false, fmt.Errorf("argument %q must be a number, got the string %q", key, x)
		}
	default:
		// Go integer and float types, from callers that build args
		// themselves (JSON decoding gives float64 or json.Number).
		switch rv := reflect.ValueOf(v); {
		case rv.CanInt():
			f = float64(rv.Int())
		case rv.CanUint():
			f = float64(rv.Uint())
		case rv.CanFloat():
			f = rv.Float()
		default:
			return 0, false, fmt.Errorf("argument %q must be a number, got %s", key, kind(v))
		}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false, fmt.Errorf("argument %q must be a finite number", key)
	}
	return f, true, nil
}

// Int returns the optional integer argument key; integral floats and
// numeric strings are accepted. The result is clamped to ±2^53 so that later
// arithmetic cannot overflow.
func Int(args map[string]any, key string) (int64, bool, error) {
	f, ok, err := Number(args, key)
	if err != nil || !ok {
		return 0, ok, err
	}
	if f != math.Trunc(f) {
		return 0, false, fmt.Errorf("argument %q must be a whole number, got %v", key, f)
	}
	const limit = 1 << 53
	return int64(max(-limit, min(limit, f))), true, nil
}

// Bool returns the optional boolean argument key; "true" and "false" as
// strings are accepted, a missing or null argument is false.
func Bool(args map[string]any, key string) (bool, error) {
	v, ok := args[key]
	if !ok || v == nil {
		return false, nil
	}
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true":
			return true, nil
		case "false", "":
			return false, nil
		}
		return false, fmt.Errorf("argument %q must be a boolean, got the string %.40q", key, x)
	}
	return false, fmt.Errorf("argument %q must be a boolean, got %s", key, kind(v))
}
