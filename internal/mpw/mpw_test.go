package mpw

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// lib returns what the library's encoder writes through enc.
func lib(t *testing.T, enc func(*msgpack.Encoder) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := enc(msgpack.NewEncoder(&buf)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestAsLibrary: each append helper writes the library's bytes at every
// boundary of its forms, after bytes already in the buffer.
func TestAsLibrary(t *testing.T) {
	t.Parallel()
	type tc struct {
		name string
		ours func([]byte) []byte
		lib  func(*msgpack.Encoder) error
	}
	var cases []tc
	for _, n := range []int64{0, 1, 31, -1, -32, -33, 127, 128, 255, 256, math.MaxUint16, math.MaxUint16 + 1, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		math.MinInt8, math.MinInt8 - 1, math.MinInt16, math.MinInt16 - 1, math.MinInt32, math.MinInt32 - 1, math.MinInt64} {
		cases = append(cases,
			tc{fmt.Sprint("Int ", n), func(b []byte) []byte { return Int(b, n) }, func(e *msgpack.Encoder) error { return e.EncodeInt(n) }},
			tc{fmt.Sprint("Int64 ", n), func(b []byte) []byte { return Int64(b, n) }, func(e *msgpack.Encoder) error { return e.EncodeInt64(n) }},
			tc{fmt.Sprint("Uint64 ", uint64(n)), func(b []byte) []byte { return Uint64(b, uint64(n)) }, func(e *msgpack.Encoder) error { return e.EncodeUint64(uint64(n)) }})
	}
	for _, n := range []int{0, 1, 15, 16, 31, 32, 255, 256, math.MaxUint16, math.MaxUint16 + 1} {
		s := strings.Repeat("x", n)
		cases = append(cases,
			tc{fmt.Sprint("Str ", n), func(b []byte) []byte { return Str(b, s) }, func(e *msgpack.Encoder) error { return e.EncodeString(s) }},
			tc{fmt.Sprint("Bin ", n), func(b []byte) []byte { return Bin(b, []byte(s)) }, func(e *msgpack.Encoder) error { return e.EncodeBytes([]byte(s)) }},
			tc{fmt.Sprint("ArrayLen ", n), func(b []byte) []byte { return ArrayLen(b, n) }, func(e *msgpack.Encoder) error { return e.EncodeArrayLen(n) }})
	}
	for _, f := range []float64{0, -1.5, math.Inf(1), math.MaxFloat64} {
		cases = append(cases, tc{fmt.Sprint("Float64 ", f), func(b []byte) []byte { return Float64(b, f) }, func(e *msgpack.Encoder) error { return e.EncodeFloat64(f) }})
	}
	for _, v := range []bool{false, true} {
		cases = append(cases, tc{fmt.Sprint("Bool ", v), func(b []byte) []byte { return Bool(b, v) }, func(e *msgpack.Encoder) error { return e.EncodeBool(v) }})
	}
	cases = append(cases, tc{"Nil", Nil, func(e *msgpack.Encoder) error { return e.EncodeNil() }})
	// Maps of 0 to 17 pairs: a fixmap's header moves the pairs back over
	// the room Begin left; 16 and more keep a map16 header.
	for n := range 18 {
		cases = append(cases, tc{fmt.Sprint("Map ", n), func(b []byte) []byte {
			m := Begin(b)
			for i := range n {
				b = Int(m.Key(b, fmt.Sprintf("k%02d", i)), int64(i))
			}
			return m.End(b)
		}, func(e *msgpack.Encoder) error {
			if err := e.EncodeMapLen(n); err != nil {
				return err
			}
			for i := range n {
				if err := e.EncodeString(fmt.Sprintf("k%02d", i)); err != nil {
					return err
				}
				if err := e.EncodeInt(int64(i)); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	prefix := []byte{0xde, 0xad}
	for _, c := range cases {
		got := c.ours(append([]byte(nil), prefix...))
		want := append(append([]byte(nil), prefix...), lib(t, c.lib)...)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: % x…, want % x…", c.name, got[:min(len(got), 16)], want[:min(len(want), 16)])
		}
	}
}

// TestOptOmitsEmpty: the Opt methods write nothing for an empty value, as
// the library's omitempty, and the map counts only what they wrote.
func TestOptOmitsEmpty(t *testing.T) {
	t.Parallel()
	b := []byte{}
	m := Begin(b)
	b = m.OptStr(b, "s", "")
	b = m.OptBool(b, "b", false)
	b = m.OptInt(b, "i", 0)
	b = m.OptInt64(b, "i64", 0)
	b = m.OptUint64(b, "u64", 0)
	b = m.OptFloat64(b, "f", 0)
	b = m.OptArrayLen(b, "a", 0)
	b = m.OptStr(b, "x", "y")
	b = m.End(b)
	want := lib(t, func(e *msgpack.Encoder) error { return e.Encode(map[string]string{"x": "y"}) })
	if !bytes.Equal(b, want) {
		t.Errorf("% x, want % x", b, want)
	}
}
