// Package jsonfast reads single fields out of small, well-known JSON events
// without reflection, for the hot path of streaming decoders. Every function
// reports ok=false when it is not sure; callers then fall back to
// encoding/json, so a surprise costs speed, never correctness.
package jsonfast

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// find returns the position just after `"key":` and any spaces, or -1. It
// relies on the caller knowing key occurs once in the event: a key inside a
// string value is always escaped (\"key\") and so never matches.
func find(data []byte, key string) int {
	var pat [64]byte
	if len(key)+3 > len(pat) {
		return -1
	}
	p := append(pat[:0], '"')
	p = append(p, key...)
	p = append(p, '"')
	i := bytes.Index(data, p)
	if i < 0 || bytes.Contains(data[i+len(p):], p) {
		return -1 // absent or ambiguous
	}
	j := i + len(p)
	for j < len(data) && (data[j] == ' ' || data[j] == '\t') {
		j++
	}
	if j >= len(data) || data[j] != ':' {
		return -1
	}
	j++
	for j < len(data) && (data[j] == ' ' || data[j] == '\t') {
		j++
	}
	return j
}

// Str returns the string value of key.
func Str(data []byte, key string) (string, bool) {
	j := find(data, key)
	if j < 0 || j >= len(data) || data[j] != '"' {
		return "", false
	}
	escaped := false
	for k := j + 1; k < len(data); k++ {
		switch data[k] {
		case '\\':
			escaped = true
			k++
		case '"':
			raw := data[j : k+1]
			if !escaped && utf8.Valid(raw) {
				return string(raw[1 : len(raw)-1]), true
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return "", false
			}
			return s, true
		default:
			if data[k] < 0x20 {
				return "", false
			}
		}
	}
	return "", false
}

// Int returns the integer value of key.
func Int(data []byte, key string) (int, bool) {
	j := find(data, key)
	if j < 0 {
		return 0, false
	}
	k := j
	for k < len(data) && (data[k] >= '0' && data[k] <= '9' || data[k] == '-') {
		k++
	}
	if k < len(data) && strings.IndexByte(",}] \t\r\n", data[k]) < 0 {
		return 0, false // a fraction, an exponent: not an integer
	}
	n, err := strconv.Atoi(string(data[j:k]))
	return n, err == nil
}
