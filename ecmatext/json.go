package ecmatext

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Object is a JSON object with its keys in the order they were read (a
// decoded map[string]any has lost it). Set adds keys.
type Object struct {
	Keys   []string
	Values []any
}

// Set sets key to v as JSON.parse does: a new key goes last, a repeated key
// keeps its first place and takes the last value.
func (o *Object) Set(key string, v any) {
	for i, k := range o.Keys {
		if k == key {
			o.Values[i] = v
			return
		}
	}
	o.Keys = append(o.Keys, key)
	o.Values = append(o.Values, v)
}

// Number is a JSON number literal, kept as written.
type Number string

// AppendJSON appends JSON.stringify(v) to b: JavaScript's own JSON text for
// a value decoded from JSON, the one emulation of it the module has.
//
//   - nil, bool and string as JSON.stringify writes them: no HTML escaping,
//     U+2028 and U+2029 as they are, control characters as \b \f \n \r \t
//     or \u00XX, and a lone surrogate (which a decoder keeping it writes as
//     WTF-8, ED A0–BF xx) as \uXXXX;
//   - numbers (float64, int, int64, json.Number, Number) as JavaScript's
//     Number.prototype.toString spells the double they are, non-finite ones
//     as null, a literal out of range as ±Infinity (null) or 0;
//   - []any in order; *Object in JavaScript's key order (array-index keys
//     ascending first, then the others as they came); map[string]any with
//     its keys sorted, since a Go map has lost the order JavaScript keeps;
//   - any other value as encoding/json marshals it, read back as one of the
//     above (so its strings follow the same rules).
func AppendJSON(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case string:
		return appendString(b, x)
	case float64:
		return appendNumber(b, x)
	case int:
		return appendNumber(b, float64(x))
	case int64:
		return appendNumber(b, float64(x))
	case json.Number:
		return appendLiteral(b, string(x))
	case Number:
		return appendLiteral(b, string(x))
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSON(b, e)
		}
		return append(b, ']')
	case map[string]any:
		var arr [16]string
		keys := arr[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			b = appendMember(b, i, k, x[k])
		}
		return append(b, '}')
	case *Object:
		return appendObject(b, x)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var generic any
	if d.Decode(&generic) != nil {
		return append(b, "null"...)
	}
	return AppendJSON(b, generic)
}

func appendObject(b []byte, o *Object) []byte {
	b = append(b, '{')
	var index []int
	for i, k := range o.Keys {
		if isArrayIndex(k) {
			index = append(index, i)
		}
	}
	slices.SortFunc(index, func(a, c int) int {
		ka, kc := o.Keys[a], o.Keys[c]
		if len(ka) != len(kc) {
			return len(ka) - len(kc)
		}
		return strings.Compare(ka, kc)
	})
	n := 0
	for _, i := range index {
		b = appendMember(b, n, o.Keys[i], o.Values[i])
		n++
	}
	for i, k := range o.Keys {
		if len(index) == 0 || !isArrayIndex(k) {
			b = appendMember(b, n, k, o.Values[i])
			n++
		}
	}
	return append(b, '}')
}

// appendMember appends the n-th member of an object.
func appendMember(b []byte, n int, k string, v any) []byte {
	if n > 0 {
		b = append(b, ',')
	}
	b = appendString(b, k)
	b = append(b, ':')
	return AppendJSON(b, v)
}

// isArrayIndex reports whether k is a canonical array index (0 to 2³²−2),
// which JavaScript objects order before every other key.
func isArrayIndex(k string) bool {
	if k == "" || len(k) > 10 || (len(k) > 1 && k[0] == '0') {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < '0' || k[i] > '9' {
			return false
		}
	}
	n, err := strconv.ParseUint(k, 10, 64)
	return err == nil && n < 1<<32-1
}

const hexDigits = "0123456789abcdef"

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] needs no escape
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != 0xED {
			continue
		}
		b = append(b, s[start:i]...)
		start = i + 1
		switch {
		case c == '"':
			b = append(b, '\\', '"')
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		case i+2 < len(s) && s[i+1] >= 0xA0 && s[i+1] <= 0xBF:
			// A lone surrogate in WTF-8 (ED A0–BF xx), escaped as
			// JSON.stringify escapes one.
			r := rune(c&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F)
			b = append(b, '\\', 'u', hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
			i += 2
			start = i + 1
		default:
			start = i // any other sequence starting with ED is copied
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendLiteral appends a JSON number literal as JavaScript spells the
// double it parses to (a range error leaves ±Inf or a value rounded to
// zero, as in JavaScript).
func appendLiteral(b []byte, lit string) []byte {
	f, _ := strconv.ParseFloat(lit, 64)
	return appendNumber(b, f)
}

// appendNumber appends Number.prototype.toString(f), null for NaN and
// ±Infinity (JSON.stringify's spelling of them).
func appendNumber(b []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 0) || math.IsNaN(f):
		return append(b, "null"...)
	case f == math.Trunc(f) && math.Abs(f) < 1<<53:
		// An integer a double holds exactly: its digits (-0 is 0).
		return strconv.AppendInt(b, int64(f), 10)
	}
	if f < 0 {
		b = append(b, '-')
		f = -f
	}
	// Shortest round-trip digits d1.d2…dk × 10^(n-1).
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64)
	i := bytes.IndexByte(e, 'e')
	x, _ := strconv.Atoi(string(e[i+1:]))
	var dbuf [24]byte
	digits := append(dbuf[:0], e[0])
	if i > 1 {
		digits = append(digits, e[2:i]...) // skip the point
	}
	k, n := len(digits), x+1
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return b
}
