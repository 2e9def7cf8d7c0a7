// Package jsonfast reads single fields out of small, well-known JSON events
// without reflection, for the hot path of streaming decoders. Every function
// reports ok=false when it is not sure; callers then fall back to
// encoding/json, so a surprise costs speed, never correctness.
//
// A caller checks the event with Valid, then finds the fields it reads at
// their place with Members and Element (one pass a level; twins in any
// case and escaped keys are not sure), as encoding/json decodes them into
// a struct, and reads them with StrIn and IntIn: each provider's fast
// path is fuzzed against its decoder.
package jsonfast

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// str reads the string value starting at data[j].
func str(data []byte, j int) (string, bool) {
	if j >= len(data) || data[j] != '"' {
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

// integer reads the integer value starting at data[j].
func integer(data []byte, j int) (int, bool) {
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

// Missing is the position Members gives a key the object does not have
// in any case (where encoding/json leaves the field as it was), and
// Element an element past the array's end.
const Missing = -2

// Members finds keys in the object at data[j] (valid JSON) in one pass:
// pos[i] is where the value of keys[i] starts, or Missing. It reports
// false when it is not sure: data[j] is no object (or j is no position),
// a key is spelled with
// escapes (it may spell one of keys), or one of keys appears twice, in
// any case (encoding/json matches field names without case and takes
// the last).
func Members(data []byte, j int, keys []string, pos []int) bool {
	if j < 0 {
		return false
	}
	if j = skipSpace(data, j); j >= len(data) || data[j] != '{' {
		return false
	}
	for i := range pos {
		pos[i] = Missing
	}
	j = skipSpace(data, j+1)
	for j < len(data) && data[j] == '"' {
		end := j + 1 + bytes.IndexByte(data[j+1:], '"')
		if end <= j {
			return false
		}
		name := data[j+1 : end]
		if bytes.IndexByte(name, '\\') >= 0 {
			return false // an escaped key: it may spell one of keys
		}
		j = skipSpace(data, end+1)
		if j >= len(data) || data[j] != ':' {
			return false
		}
		j = skipSpace(data, j+1)
		for i, key := range keys {
			if string(name) == key {
				if pos[i] != Missing {
					return false // twins: encoding/json takes the last
				}
				pos[i] = j
			} else if foldEqual(name, key) {
				return false // a twin in another case
			}
		}
		j = skipSpace(data, skipValue(data, j))
		if j >= len(data) || data[j] != ',' {
			break
		}
		j = skipSpace(data, j+1)
	}
	return j < len(data) && data[j] == '}'
}

// StrIn returns the string whose value starts at data[j] (a position
// Members or Element returned).
func StrIn(data []byte, j int) (string, bool) {
	if j < 0 {
		return "", false
	}
	return str(data, j)
}

// IntIn returns the integer whose value starts at data[j] (a position
// Members or Element returned); Missing reads as 0.
func IntIn(data []byte, j int) (int, bool) {
	switch {
	case j == Missing:
		return 0, true
	case j < 0:
		return 0, false
	}
	return integer(data, j)
}

// Element returns where the nth element (from 0) of the array at data[j]
// starts, Missing when it has fewer, or -1 when data[j] is no array (or
// j is no position: a Missing or -1 passed on).
func Element(data []byte, j, n int) int {
	if j < 0 {
		return -1
	}
	if j = skipSpace(data, j); j >= len(data) || data[j] != '[' {
		return -1
	}
	j = skipSpace(data, j+1)
	if j < len(data) && data[j] == ']' {
		return Missing
	}
	for i := 0; j < len(data); i++ {
		if i == n {
			return j
		}
		j = skipSpace(data, skipValue(data, j))
		if j >= len(data) || data[j] != ',' {
			return Missing
		}
		j = skipSpace(data, j+1)
	}
	return -1
}

// End returns where the value starting at data[j] (a position Members or
// Element returned, in valid JSON) ends: data[j:End(data, j)] is the
// value; -1 for no position.
func End(data []byte, j int) int {
	if j < 0 {
		return -1
	}
	return skipValue(data, j)
}

// foldEqual reports whether name equals key under Unicode case folding
// (as encoding/json matches field names); an ASCII name of another
// length never does.
func foldEqual(name []byte, key string) bool {
	if len(name) != len(key) {
		ascii := true
		for _, c := range name {
			if c >= 0x80 {
				ascii = false
				break
			}
		}
		if ascii {
			return false
		}
	}
	return bytes.EqualFold(name, []byte(key))
}

// skipValue returns the index just past the (valid) value at data[j].
func skipValue(data []byte, j int) int {
	depth := 0
	for ; j < len(data); j++ {
		switch c := data[j]; c {
		case '"':
			j = skipString(data, j)
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j // the end of the enclosing object: a scalar ended
			}
			if depth--; depth == 0 {
				return j + 1
			}
		case ',', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return j
			}
		}
	}
	return j
}

// skipString returns the index of the quote closing the (valid) string
// at data[j].
func skipString(data []byte, j int) int {
	for {
		k := bytes.IndexByte(data[j+1:], '"')
		if k < 0 {
			return len(data) - 1
		}
		j += 1 + k
		n := 0 // the backslashes before it: an odd count escapes it
		for b := j - 1; b >= 0 && data[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return j
		}
	}
}

func skipSpace(data []byte, j int) int {
	for j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\r' || data[j] == '\n') {
		j++
	}
	return j
}
