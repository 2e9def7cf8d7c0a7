// Package mpw appends msgpack values to byte slices exactly as the
// msgpack library (github.com/vmihailenco/msgpack/v5, default flags)
// encodes them, for the hand-written encoders of the types a turn writes
// (events, transcript entries): the library's reflection, and its
// omitempty check that boxes every field, cost a turn hundreds of
// allocations.
package mpw

import (
	"encoding/binary"
	"math"
)

// Map is a map being appended: where its header goes and how many pairs
// it has so far. Begin leaves three bytes for the header (map16) before
// the first key; End writes it and, for a fixmap, moves the pairs back
// over the two bytes it does not need.
type Map struct{ at, n int }

// Begin starts a map at the end of b.
func Begin(b []byte) Map { return Map{at: len(b)} }

// Key appends a key.
func (m *Map) Key(b []byte, key string) []byte {
	if m.n == 0 {
		b = append(b, 0, 0, 0)
	}
	m.n++
	return Str(b, key)
}

// End writes the map's header (the library's EncodeMapLen).
func (m *Map) End(b []byte) []byte {
	if m.n == 0 {
		return append(b, 0x80)
	}
	if m.n < 16 {
		b[m.at] = 0x80 | byte(m.n)
		return append(b[:m.at+1], b[m.at+3:]...)
	}
	b[m.at] = 0xde
	binary.BigEndian.PutUint16(b[m.at+1:], uint16(m.n))
	return b
}

// The Opt methods append a pair unless its value is empty, as the
// library's omitempty.

// OptStr appends key and v unless v is "".
func (m *Map) OptStr(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return Str(m.Key(b, key), v)
}

// OptBool appends key and true when v is.
func (m *Map) OptBool(b []byte, key string, v bool) []byte {
	if !v {
		return b
	}
	return append(m.Key(b, key), 0xc3)
}

// OptInt appends a Go int (the library writes it in its shortest form)
// unless it is 0.
func (m *Map) OptInt(b []byte, key string, v int) []byte {
	if v == 0 {
		return b
	}
	return Int(m.Key(b, key), int64(v))
}

// OptInt64 appends a Go int64 (nine bytes) unless it is 0.
func (m *Map) OptInt64(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return Int64(m.Key(b, key), v)
}

// OptUint64 appends a Go uint64 (nine bytes) unless it is 0.
func (m *Map) OptUint64(b []byte, key string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return Uint64(m.Key(b, key), v)
}

// OptFloat64 appends a float64 unless it is 0.
func (m *Map) OptFloat64(b []byte, key string, v float64) []byte {
	if v == 0 {
		return b
	}
	return Float64(m.Key(b, key), v)
}

// OptArrayLen appends key and the header of an array of n elements unless
// n is 0 (an empty or nil slice, which omitempty drops); the caller
// appends the n elements.
func (m *Map) OptArrayLen(b []byte, key string, n int) []byte {
	if n == 0 {
		return b
	}
	return ArrayLen(m.Key(b, key), n)
}

// Str is the library's EncodeString.
func Str(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xda)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

// ArrayLen is the library's EncodeArrayLen.
func ArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

// Int is the library's EncodeInt: the shortest form.
func Int(b []byte, n int64) []byte {
	if n >= 0 {
		switch {
		case n <= math.MaxInt8:
			return append(b, byte(n))
		case n <= math.MaxUint8:
			return append(b, 0xcc, byte(n))
		case n <= math.MaxUint16:
			return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
		case n <= math.MaxUint32:
			return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
		default:
			return binary.BigEndian.AppendUint64(append(b, 0xcf), uint64(n))
		}
	}
	switch {
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	default:
		return Int64(b, n)
	}
}

// Int64 is the library's EncodeInt64: nine bytes.
func Int64(b []byte, n int64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

// Uint64 is the library's EncodeUint64: nine bytes.
func Uint64(b []byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
}

// Float64 is the library's EncodeFloat64: nine bytes.
func Float64(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(f))
}

// Bool is the library's EncodeBool.
func Bool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

// Nil is the library's EncodeNil.
func Nil(b []byte) []byte { return append(b, 0xc0) }

// Bin is the library's EncodeBytes of a non-nil slice.
func Bin(b []byte, v []byte) []byte {
	switch n := len(v); {
	case n < 256:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, v...)
}
