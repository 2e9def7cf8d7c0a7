package events

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// bomb is the payload of issue 10: a map whose "images" array declares
// 2^32-1 elements in 13 bytes. Before the walk, decoding it asked the
// runtime for 2^32-1 Images and killed the worker.
var bomb = unhex("81a6696d61676573ddffffffff")

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// nested returns depth arrays, each holding the next, around a nil.
func nested(depth int) []byte {
	return append(bytes.Repeat([]byte{0x91}, depth), 0xc0)
}

// nestedMaps returns depth maps {"a": {"a": … nil}}.
func nestedMaps(depth int) []byte {
	return append(bytes.Repeat([]byte{0x81, 0xa1, 'a'}, depth), 0xc0)
}

func TestCheckMsgpack(t *testing.T) {
	t.Parallel()
	str := func(n int) string { return strings.Repeat("s", n) }
	tests := []struct {
		name string
		data []byte
		err  error  // nil = accepted; else the sentinel wrapped (or errAny)
		part string // substring of the error
	}{
		// Every type family, as the library encodes it.
		{"positive fixint", mustPack(t, 7), nil, ""},
		{"negative fixint", mustPack(t, -7), nil, ""},
		{"nil", mustPack(t, nil), nil, ""},
		{"bools", mustPack(t, []bool{true, false}), nil, ""},
		{"float32", mustPack(t, float32(1.5)), nil, ""},
		{"float64", mustPack(t, math.Pi), nil, ""},
		{"uint8 16 32 64", mustPack(t, []uint64{200, 60000, 1 << 31, 1 << 63}), nil, ""},
		{"int8 16 32 64", mustPack(t, []int64{-100, -30000, -1 << 30, -1 << 62}), nil, ""},
		{"fixstr", mustPack(t, "hi"), nil, ""},
		{"str8", mustPack(t, str(200)), nil, ""},
		{"str16", mustPack(t, str(60000)), nil, ""},
		{"str32", mustPack(t, str(70000)), nil, ""},
		{"bin8 16 32", mustPack(t, [][]byte{make([]byte, 3), make([]byte, 300), make([]byte, 70000)}), nil, ""},
		{"fixext 1 2 4 8 16", unhex("95 d4 01 aa  d5 01 aabb  d6 01 aabbccdd  d7 01 0011223344556677  d8 01 00112233445566778899aabbccddeeff"), nil, ""},
		{"ext 8 16 32", unhex("93 c7 02 05 aabb  c8 0001 05 aa  c9 00000001 05 aa"), nil, ""},
		{"timestamp ext", mustPack(t, time.Unix(1700000000, 5)), nil, ""},
		{"fixarray", mustPack(t, []int{1, 2, 3}), nil, ""},
		{"array16", mustPack(t, make([]int, 100)), nil, ""},
		{"array32", mustPack(t, make([]int, 70000)), nil, ""},
		{"fixmap", mustPack(t, map[string]int{"a": 1}), nil, ""},
		{"map16", unhex("de 0001 a1 61 01"), nil, ""},
		{"map32", unhex("df 00000001 a1 61 01"), nil, ""},
		{"empty containers", unhex("92 90 80"), nil, ""},
		{"an event", mustEvent(t), nil, ""},
		{"nested exactly MaxDepth", nested(MaxDepth), nil, ""},
		{"empty array at MaxDepth", append(bytes.Repeat([]byte{0x91}, MaxDepth-1), 0x90), nil, ""},

		// Declared lengths that the bytes do not back.
		{"the 13 bytes of issue 10", bomb, ErrTruncated, "array declares 4294967295 elements, 0 bytes remain"},
		{"array32 lie with bytes left", append(unhex("dd 00100000"), make([]byte, 1000)...), ErrTruncated, "array declares 1048576 elements, 1000 bytes remain"},
		{"array16 one short", unhex("dc 0003 01 02"), ErrTruncated, "array declares 3 elements, 2 bytes remain"},
		{"map pairs need two bytes each", unhex("83 01 02 03 04 05"), ErrTruncated, "map declares 3 elements, 5 bytes remain"},
		{"map32 lie", unhex("df ffffffff"), ErrTruncated, "map declares 4294967295"},
		{"fixstr longer than the rest", unhex("a5 61 62"), ErrTruncated, "str declares 5 bytes, 2 remain"},
		{"str32 lie", unhex("db 7fffffff 61"), ErrTruncated, "str declares 2147483647 bytes"},
		{"bin32 lie", unhex("c6 ffffffff"), ErrTruncated, "bin declares 4294967295 bytes"},
		{"ext32 lie", unhex("c9 ffffffff 05"), ErrTruncated, "ext declares"},
		{"fixext16 cut", unhex("d8 01 0011"), ErrTruncated, "declares 17 bytes"},
		{"float64 cut", unhex("cb 0000"), ErrTruncated, "declares 8 bytes"},
		{"str16 header cut", unhex("da 00"), ErrTruncated, "ends inside a header"},
		{"array32 header cut", unhex("dd 0000"), ErrTruncated, "ends inside a header"},
		// Each inner length fits, their sum does not: the outer array's
		// second element has no byte left.
		{"siblings outgrow the payload", unhex("92 dc 0002 01 02"), ErrTruncated, "array declares 2 elements, 2 bytes remain"},
		{"value after a string that ate the rest", unhex("92 a2 61 62"), ErrTruncated, "payload ends early"},
		{"empty", nil, ErrTruncated, "payload ends where a value should start"},

		// Nesting.
		{"arrays one level too deep", nested(MaxDepth + 1), ErrTooDeep, "deeper than 10064"},
		{"maps one level too deep", nestedMaps(MaxDepth + 1), ErrTooDeep, "deeper than"},
		{"a million levels", nested(1 << 20), ErrTooDeep, "deeper than"},

		// Not msgpack, or more than one value.
		{"never-used code", unhex("91 c1"), errAny, "0xc1 is not a msgpack type"},
		{"trailing bytes", unhex("01 02 03"), errAny, "2 bytes after the value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckMsgpack(tt.data)
			if tt.err == nil {
				if err != nil {
					t.Fatalf("CheckMsgpack = %v, want nil", err)
				}
				var v any
				if err := UnmarshalMsgpack(tt.data, &v); err != nil && !strings.Contains(err.Error(), "unknown ext") {
					t.Fatalf("accepted, then the decoder failed: %v", err)
				}
				return
			}
			var me *MsgpackError
			if !errors.As(err, &me) || !strings.Contains(err.Error(), tt.part) {
				t.Fatalf("CheckMsgpack = %v, want a MsgpackError containing %q", err, tt.part)
			}
			if tt.err != errAny && !errors.Is(err, tt.err) {
				t.Fatalf("CheckMsgpack = %v, want it to wrap %v", err, tt.err)
			}
		})
	}
}

// errAny marks a case whose error wraps no particular sentinel.
var errAny = errors.New("any error")

func mustEvent(t testing.TB) []byte {
	t.Helper()
	b, _, err := EncodeEvent(&Event{RunID: "7", SessionKey: "alice", Seq: 3, Stream: StreamTool, TS: 1,
		Data: EventData{Phase: PhaseStart, Name: "read", Args: map[string]any{"path": "a.txt", "n": []any{1, "x", nil}}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckMsgpackDoesNotAllocate: the walk costs no heap for payloads up
// to sixteen levels deep, deeper ones grow one stack of counts (at most
// MaxDepth of them), and a refusal costs only its error, whatever the
// payload declares.
func TestCheckMsgpackDoesNotAllocate(t *testing.T) {
	for _, tt := range []struct {
		data []byte
		max  float64
	}{{mustEvent(t), 0}, {nested(16), 0}, {bomb, 8}, {nested(MaxDepth + 1), 8 + 14}} {
		if n := testing.AllocsPerRun(20, func() { _ = CheckMsgpack(tt.data) }); n > tt.max {
			t.Fatalf("CheckMsgpack(%x…) allocates %.0f times, want at most %.0f", tt.data[:8], n, tt.max)
		}
	}
}

// TestHostilePayloads: the attacks of issue 10 end as errors a caller can
// act on, for every decoder that reads bytes from NATS.
func TestHostilePayloads(t *testing.T) {
	t.Parallel()
	deepJSON := strings.Repeat("[", 1<<20)
	tests := []struct {
		name string
		ct   string
		data []byte
		want error
	}{
		{"allocation bomb", "", bomb, ErrTruncated},
		{"allocation bomb by header", ContentMsgpack, bomb, ErrTruncated},
		{"deep arrays", "", nested(1 << 20), ErrTooDeep},
		{"deep maps", "", nestedMaps(1 << 18), ErrTooDeep},
		{"bomb inside a tool's parameters", "", unhex("81 a5 746f6f6c73 91 82 a4 6e616d65 a1 78 aa 706172616d6574657273 81 a1 61 dfffffffff"), ErrTruncated},
		{"many small values", ContentMsgpack, append(unhex("81 a6 696d61676573 dd 00010000"), bytes.Repeat([]byte{0xc0}, 1<<16)...), nil},
		// encoding/json has its own depth limit (10000) and allocates as
		// it reads, so JSON needs no walk; these pin that.
		{"deep JSON arrays", ContentJSON, []byte(`{"text":"a","tools":[{"name":"x","parameters":{"a":` + deepJSON + `}}]}`), nil},
		{"deep JSON by sniffing", "", []byte(`{"x":` + deepJSON), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeInbound(tt.ct, tt.data, 8<<20)
			var de *DecodeError
			if !errors.As(err, &de) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("DecodeInbound = %v, want a DecodeError wrapping %v", err, tt.want)
			}
			_, err = DecodeEvent(tt.ct, tt.data)
			if !errors.As(err, &de) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("DecodeEvent = %v, want a DecodeError wrapping %v", err, tt.want)
			}
			var v any
			if err := UnmarshalMsgpack(tt.data, &v); tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("UnmarshalMsgpack = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestInboundValueBudget: an inbound message holds at most
// MaxInboundValues values; an event (written by workers) has no such bound.
func TestInboundValueBudget(t *testing.T) {
	t.Parallel()
	parameters := func(n int) []byte {
		p := unhex("81 a5 746f6f6c73 91 82 a4 6e616d65 a1 78 aa 706172616d6574657273 81 a1 61 dd")
		p = append(p, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		return append(p, bytes.Repeat([]byte{0x01}, n)...)
	}
	// The map, "tools", its array, the tool, two keys and "x", "parameters"
	// map, "a" and its array: 10 values around the elements.
	fits := parameters(MaxInboundValues - 10)
	if _, err := DecodeInbound(ContentMsgpack, fits, 0); err == nil || errors.Is(err, ErrTooLarge) {
		// The message has no text: it is refused, but not for its size.
		t.Fatalf("DecodeInbound at the budget = %v, want an error that is not ErrTooLarge", err)
	}
	over := parameters(MaxInboundValues - 9)
	if _, err := DecodeInbound(ContentMsgpack, over, 0); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than 65536 values") {
		t.Fatalf("DecodeInbound over the budget = %v, want ErrTooLarge", err)
	}
	var v any
	if err := UnmarshalMsgpack(over, &v); err != nil {
		t.Fatalf("UnmarshalMsgpack has no budget: %v", err)
	}
}

// TestJSONDepthRoundTrip: tool arguments as deep as encoding/json accepts,
// carried in an event, encode to msgpack that decodes again (MaxDepth
// leaves room for the envelope).
func TestJSONDepthRoundTrip(t *testing.T) {
	t.Parallel()
	const jsonMax = 10000 // encoding/json's nesting limit
	var args any
	deep := strings.Repeat(`{"a":`, jsonMax) + "1" + strings.Repeat("}", jsonMax)
	if err := json.Unmarshal([]byte(deep), &args); err != nil {
		t.Fatalf("JSON at encoding/json's limit: %v", err)
	}
	if err := json.Unmarshal([]byte("["+deep+"]"), &args); err == nil {
		t.Fatal("encoding/json's limit is higher than this test assumes")
	}
	data, ct, err := EncodeEvent(&Event{Stream: StreamTool, Data: EventData{Phase: PhaseStart, Args: args}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeEvent(ct, data); err != nil {
		t.Fatalf("the same arguments in a msgpack event: %v", err)
	}
}

// TestUnmarshalMsgpackStrict: DecodeInbound still rejects unknown fields
// inside known ones (through the pooled decoder), and the pool does not
// carry that to the lenient decodes of events.
func TestUnmarshalMsgpackStrict(t *testing.T) {
	t.Parallel()
	data := mustPack(t, map[string]any{"runSettings": map[string]any{"bogus": 1}})
	for range 3 {
		if _, err := DecodeInbound("", data, 0); err == nil || !strings.Contains(err.Error(), "bogus") {
			t.Fatalf("unknown field accepted: %v", err)
		}
		ev := mustPack(t, map[string]any{"stream": "final", "bogus": 1})
		if _, err := DecodeEvent("", ev); err != nil {
			t.Fatalf("event with a newer field: %v", err)
		}
	}
}

// FuzzCheckMsgpack compares the walk with the msgpack library: what the
// walk accepts decodes without panicking, and one complete value the
// library reads is accepted by the walk unless it nests too deep.
func FuzzCheckMsgpack(f *testing.F) {
	for _, seed := range [][]byte{bomb, nested(40), nestedMaps(5), mustEvent(f), unhex("93 c7 02 05 aabb c8 0001 05 aa c9 00000001 05 aa"),
		unhex("92 dc 0002 01 02"), unhex("df ffffffff"), mustPack(f, map[string]any{"a": []any{1.5, "b", nil, true}})} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		walkErr := CheckMsgpack(data)
		r := bytes.NewReader(data)
		dec := msgpack.NewDecoder(r)
		var v any
		if walkErr != nil {
			if errors.Is(walkErr, ErrTooDeep) || errors.Is(walkErr, ErrTruncated) {
				return // the library must not see these
			}
			if dec.Decode(&v) == nil && r.Len() == 0 {
				t.Fatalf("walk refused what the library reads: %v", walkErr)
			}
			return
		}
		_ = dec.Decode(&v)
	})
}

// BenchmarkDecodeInboundWorst measures what the walk still lets through: an
// inbound payload with as many values as MaxInboundValues allows, shaped to
// make the decoder allocate the most per byte. B/op is the most one message
// can make a worker allocate that way.
func BenchmarkDecodeInboundWorst(b *testing.B) {
	n := MaxInboundValues - 16
	arrayOf := func(prefix []byte, elem byte) []byte {
		p := append(prefix, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		return append(p, bytes.Repeat([]byte{elem}, n)...)
	}
	for _, tt := range []struct {
		name string
		data []byte
	}{
		// {"images": [nil, nil, …]}: one Image (32 bytes) per byte.
		{"images", arrayOf(unhex("81 a6 696d61676573"), 0xc0)},
		// {"tools": [{"name": "x", "parameters": {"a": [[], [], …]}}]}: one
		// boxed empty slice per byte.
		{"parameters", arrayOf(unhex("81 a5 746f6f6c73 91 82 a4 6e616d65 a1 78 aa 706172616d6574657273 81 a1 61"), 0x90)},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tt.data)))
			for b.Loop() {
				_, _ = DecodeInbound(ContentMsgpack, tt.data, 0)
			}
		})
	}
}
