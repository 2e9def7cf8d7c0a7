package events

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// libraryEvent is e (an *Event, or a map standing for one) as the msgpack
// library encodes it (map keys sorted): what EncodeEvent wrote before
// appendEvent.
func libraryEvent(t testing.TB, e any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(e); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fill sets v (settable) to random values: each field, element and pointer
// is left zero about a third of the time, so every omitempty branch is
// taken both ways. Numbers are drawn from every width the encoder
// distinguishes (fixint to 64 bits, negative too), strings from every
// length class (fixstr to str16), slices from fixarray and array16 sizes.
// Interface fields (Args, Payload) stay nil: appendEvent leaves events
// with them to the library. Being reflective, it fills a field added to
// any type an event holds, and the comparison below then fails until
// appendEvent writes that field too.
func fill(r *rand.Rand, v reflect.Value, depth int) {
	if r.IntN(3) == 0 {
		v.SetZero()
		return
	}
	switch v.Kind() {
	case reflect.String:
		// Distinct per field, so a field written under another's key shows.
		n := []int{1, 5, 31, 32, 255, 256}[r.IntN(6)]
		if r.IntN(100) == 0 {
			n = []int{65535, 65536}[r.IntN(2)] // str16 and str32, rarely: they are slow to compare
		}
		s := strconv.FormatUint(r.Uint64(), 36) + strings.Repeat("x", n)
		v.SetString(s[:n])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(randInt(r))
	case reflect.Uint64:
		v.SetUint(uint64(randInt(r)))
	case reflect.Float64:
		v.SetFloat([]float64{1.5, -0.25, 1e300, math.Inf(1), math.NaN(), math.Copysign(0, -1)}[r.IntN(6)])
	case reflect.Pointer:
		if depth > 20 { // no type an event holds nests deeper
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(r, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		n := []int{0, 1, 3, 16}[r.IntN(4)]
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(r, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(r, v.Field(i), depth+1)
		}
	case reflect.Interface, reflect.Map: // values of their own type: left to the library
		v.SetZero()
	default:
		panic("fill: no case for " + v.Type().String())
	}
}

func randInt(r *rand.Rand) int64 {
	return []int64{1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}[r.IntN(20)]
}

// TestAppendEventAsLibrary: the hand encoder writes, for events filled at
// random through every field, exactly the library's bytes — the wire
// format of every event is unchanged.
func TestAppendEventAsLibrary(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		var e Event
		fill(r, reflect.ValueOf(&e).Elem(), 0)
		want := libraryEvent(t, &e)
		got, ok := appendEvent(nil, &e)
		if !ok {
			t.Fatalf("event %d: left to the library", i)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("event %d %+v:\n got  %x\n want %x", i, e, got, want)
		}
		// After other bytes, as a caller appending to a buffer.
		got, _ = appendEvent([]byte("prefix"), &e)
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("event %d after a prefix differs", i)
		}
	}
}

// TestEncodeEventArgsAndPayload: events with values of their own type go
// through the library, map keys sorted, and decode again.
func TestEncodeEventArgsAndPayload(t *testing.T) {
	t.Parallel()
	for _, e := range []*Event{
		{Stream: StreamTool, Data: EventData{Phase: PhaseStart, Name: "read", Args: map[string]any{"z": 1, "a": []any{"x", 2.5}}}},
		{Stream: StreamTool, Data: EventData{Phase: PhaseResult, Payload: map[string]any{"content": "ok", "b": true}}},
		{Stream: StreamTool, Data: EventData{Phase: PhaseResult, Payload: ""}},
	} {
		data, ct, err := EncodeEvent(e, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := libraryEvent(t, e); !bytes.Equal(data, want) {
			t.Fatalf("%+v: got %x, want %x", e, data, want)
		}
		if _, err := DecodeEvent(ct, data); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkEncodeEvent: the events of a turn, encoded by EncodeEvent and
// by the library (what EncodeEvent did before).
func BenchmarkEncodeEvent(b *testing.B) {
	for _, tt := range []struct {
		name string
		e    *Event
	}{
		{"start", &Event{V: Version, RunID: "0193c0de-aaaa", SessionKey: "alice", Seq: 1, Attempt: 1, Stream: StreamLifecycle, TS: 1700000000000,
			Data: EventData{Phase: PhaseStart, StartedAt: 1700000000000, Worker: "w1", InboundSeq: 12345}}},
		{"delta", &Event{V: Version, RunID: "0193c0de-aaaa", SessionKey: "alice", Seq: 17, Attempt: 1, Stream: StreamAssistant, TS: 1700000000000,
			Data: EventData{Delta: "the weather ", Text: "Today the weather "}}},
		{"final", &Event{V: Version, RunID: "0193c0de-aaaa", SessionKey: "alice", Seq: 40, Attempt: 1, Stream: StreamFinal, TS: 1700000000000,
			Data: EventData{Result: &Result{Payloads: []Payload{{Text: "Today the weather is fine."}},
				Meta: Meta{DurationMs: 1234, StopReason: "stop", AgentMeta: &AgentMeta{SessionID: "0193c0de-aaaa-bbbb-cccc-1234567890ab",
					Provider: "anthropic", Model: "claude-sonnet-4-6", Usage: &UsageMeta{Input: 1200, Output: 300, Total: 1500}, LastCallUsage: &UsageMeta{Input: 1200, Output: 300, Total: 1500}},
					Session: &SessionState{Usage: &UsageMeta{Input: 12000, Output: 3000, Total: 15000}, Turns: 10}}}}}},
	} {
		b.Run(tt.name+"/EncodeEvent", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := EncodeEvent(tt.e, false); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tt.name+"/library", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				libraryEvent(b, tt.e)
			}
		})
	}
}

// TestAppendInboundAsLibrary: inbound messages filled at random write the
// library's bytes, by hand when they hold none of the fields left to the
// library (which half of them are cleared of).
func TestAppendInboundAsLibrary(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	byHand := 0
	for i := range 3000 {
		var in Inbound
		fill(r, reflect.ValueOf(&in).Elem(), 0)
		if i%2 == 0 {
			in.Tools, in.ToolResults, in.QueueSettings, in.RunSettings, in.Parent, in.Subagent = nil, nil, nil, nil, nil, nil
		}
		want, err := msgpack.Marshal(&in)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := appendInbound(nil, &in); ok {
			byHand++
		} else if i%2 == 0 {
			t.Fatalf("inbound %d: left to the library", i)
		}
		got, err := AppendInbound([]byte("prefix"), &in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("inbound %d %+v:\n got  %x\n want %x", i, in, got[len("prefix"):], want)
		}
	}
	if byHand < 1500 {
		t.Fatalf("%d of 3000 written by hand", byHand)
	}
}

// BenchmarkEncodeInbound: a chat message, by EncodeInbound and by the
// library (what it did before).
func BenchmarkEncodeInbound(b *testing.B) {
	in := &Inbound{V: Version, ID: "0193c0de-aaaa-bbbb", Text: "What is the weather like in Paris today?", Sent: 1700000000000}
	b.Run("EncodeInbound", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := EncodeInbound(in, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}
