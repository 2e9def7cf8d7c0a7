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
	if j < 0 {
		return "", false
	}
	return str(data, j)
}

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

// Int returns the integer value of key.
func Int(data []byte, key string) (int, bool) {
	j := find(data, key)
	if j < 0 {
		return 0, false
	}
	return integer(data, j)
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

// StrAt returns the string at path in data, which must be valid JSON
// (see At).
func StrAt(data []byte, path ...string) (string, bool) {
	j := At(data, path...)
	if j < 0 {
		return "", false
	}
	return str(data, j)
}

// IntAt returns the integer at path in data, which must be valid JSON
// (see At).
func IntAt(data []byte, path ...string) (int, bool) {
	j := At(data, path...)
	if j < 0 {
		return 0, false
	}
	return integer(data, j)
}

// At returns where the value at path starts in data, a JSON object whose
// path[0] member is an object whose path[1] member …, or -1 when it is not
// sure: a level is no object, the key is absent, or a key at a level read
// is spelled with escapes or appears twice there, in any case
// (encoding/json takes the last of twins). Unlike Str and Int it finds a key only where the path
// says, never in a nested object or a string. data must be valid JSON
// (json.Valid): At skips the values it passes without checking them.
func At(data []byte, path ...string) int {
	j := 0
	for i, key := range path {
		j = member(data, skipSpace(data, j), key)
		if j == Missing && i == len(path)-1 {
			return Missing
		}
		if j < 0 {
			return -1
		}
	}
	return j
}

// Missing is what At returns when the object holding the path's last key
// has no member of that name in any case (where encoding/json leaves the
// field as it was).
const Missing = -2

// OptIntAt is IntAt with a missing last key read as 0.
func OptIntAt(data []byte, path ...string) (int, bool) {
	switch j := At(data, path...); {
	case j == Missing:
		return 0, true
	case j < 0:
		return 0, false
	default:
		return integer(data, j)
	}
}

// member returns where the value of key starts in the object at data[j],
// Missing, or -1 (see At).
func member(data []byte, j int, key string) int {
	if j >= len(data) || data[j] != '{' {
		return -1
	}
	found := -1
	j = skipSpace(data, j+1)
	for j < len(data) && data[j] == '"' {
		end := j + 1 + bytes.IndexByte(data[j+1:], '"')
		if end <= j {
			return -1
		}
		name := data[j+1 : end]
		if bytes.IndexByte(name, '\\') >= 0 {
			return -1 // an escaped key: it may spell key
		}
		j = skipSpace(data, end+1)
		if j >= len(data) || data[j] != ':' {
			return -1
		}
		j = skipSpace(data, j+1)
		if string(name) == key {
			if found >= 0 {
				return -1 // twins: encoding/json takes the last
			}
			found = j
		} else if foldEqual(name, key) {
			// encoding/json matches a struct's field names without
			// case, the last one winning: a twin in another case is a
			// twin too.
			return -1
		}
		j = skipSpace(data, skipValue(data, j))
		if j >= len(data) || data[j] != ',' {
			break
		}
		j = skipSpace(data, j+1)
	}
	if found < 0 && j < len(data) && data[j] == '}' {
		return Missing
	}
	return found
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
