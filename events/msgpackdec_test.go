package events

import (
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"

	"github.com/lanefleet/lanefleet/internal/mpw"
)

// libraryDecode is data decoded by the library alone, as DecodeEvent did
// before readEvent.
func libraryDecode(data []byte) (Event, error) {
	var e Event
	err := decodeChecked(data, &e, false)
	return e, err
}

// TestReadEventAsLibrary: events filled at random through every field
// (as TestAppendEventAsLibrary's), encoded, read back by readEvent equal
// what the library reads — and readEvent takes them, unless they hold a
// sub-agent field of the session state, which it leaves to the library.
func TestReadEventAsLibrary(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	fast := 0
	for i := range 3000 {
		var e Event
		fill(r, reflect.ValueOf(&e).Elem(), 0)
		data := libraryEvent(t, &e)
		want, err := libraryDecode(data)
		if err != nil {
			t.Fatal(err)
		}
		var got Event
		if !readEvent(data, &got) {
			if s := sessionOf(&e); s == nil || (s.Parent == nil && len(s.Children) == 0 && len(s.Approvals) == 0) {
				t.Fatalf("event %d %+v: left to the library", i, e)
			}
			continue
		}
		fast++
		if !sameEvent(&got, &want) {
			t.Fatalf("event %d:\n got  %+v\n want %+v", i, got, want)
		}
	}
	if fast < 1000 {
		t.Fatalf("readEvent took %d of 3000 events", fast)
	}
}

// sameEvent is reflect.DeepEqual with NaN equal to NaN (fill writes NaN
// costs). It changes NaNs in a and b.
func sameEvent(a, b *Event) bool {
	unNaN(reflect.ValueOf(a).Elem())
	unNaN(reflect.ValueOf(b).Elem())
	return reflect.DeepEqual(a, b)
}

func unNaN(v reflect.Value) {
	switch v.Kind() {
	case reflect.Float64:
		if math.IsNaN(v.Float()) {
			v.SetFloat(-12345)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			unNaN(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			unNaN(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			unNaN(v.Field(i))
		}
	}
}

func sessionOf(e *Event) *SessionState {
	if e.Data.Result == nil {
		return nil
	}
	return e.Data.Result.Meta.Session
}

// TestReadEventLeavesTheRest: what readEvent does not take, DecodeEvent
// still decodes with the library: args and payloads, unknown fields (a
// newer worker's), a key written twice, integers written as floats.
func TestReadEventLeavesTheRest(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		data []byte
	}{
		{"args", libraryEvent(t, &Event{Stream: StreamTool, Data: EventData{Args: map[string]any{"path": "a"}}})},
		{"unknown field", libraryEvent(t, map[string]any{"stream": "final", "seq": 3, "newField": []any{1, "x"}})},
		{"key twice", mpw.Str(mpw.Str(mpw.Str(mpw.Str([]byte{0x82}, "stream"), "a"), "stream"), "final")},
		{"float seq", libraryEvent(t, map[string]any{"stream": "final", "seq": 3.0})},
	} {
		var e Event
		if readEvent(tt.data, &e) {
			t.Fatalf("%s: taken by readEvent", tt.name)
		}
		got, err := DecodeEvent(ContentMsgpack, tt.data)
		want, werr := libraryDecode(tt.data)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%s: DecodeEvent %v, library %v", tt.name, err, werr)
		}
		if err == nil && !reflect.DeepEqual(*got, want) {
			t.Fatalf("%s: got %+v, want %+v", tt.name, *got, want)
		}
	}
}

// FuzzReadEventAsLibrary: whatever bytes the walk accepts and readEvent
// takes, the library reads the same event from; and readEvent, handed any
// bytes (DecodeEvent walks them first), does not panic.
func FuzzReadEventAsLibrary(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 40 {
		var e Event
		fill(r, reflect.ValueOf(&e).Elem(), 0)
		if b, ok := appendEvent(nil, &e); ok && len(b) < 4096 {
			f.Add(b)
		}
	}
	for _, e := range []*Event{
		{RunID: "r", SessionKey: "s", Seq: 1, Stream: StreamAssistant, TS: 5, Data: EventData{Delta: "po", Text: "pong"}},
		{RunID: "r", Seq: 9, Stream: StreamFinal, Data: EventData{Result: &Result{Payloads: []Payload{{Text: "pong"}}, Meta: Meta{DurationMs: 3,
			AgentMeta: &AgentMeta{Usage: &UsageMeta{Input: 1, Cost: &CostMeta{Total: 0.5}}}, Session: &SessionState{Turns: 2}}}}},
	} {
		b, _ := appendEvent(nil, e)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got Event
		took := readEvent(data, &got) // on any bytes, checked or not: no panic
		if !took || checkMsgpack(data, 0) != nil {
			return
		}
		want, err := libraryDecode(data)
		if err != nil {
			t.Fatalf("readEvent took %x, the library fails: %v", data, err)
		}
		if !sameEvent(&got, &want) {
			t.Fatalf("%x:\n got  %+v\n want %+v", data, got, want)
		}
	})
}

// TestReadEventCraftedBytes: readEvent, handed bytes the walk would
// refuse, neither panics nor takes them: every cut of a final event, and
// an array that declares millions of payloads it does not hold, which it
// refuses before allocating them.
func TestReadEventCraftedBytes(t *testing.T) {
	full, ok := appendEvent(nil, &Event{RunID: "r", SessionKey: "s", Seq: 9, Stream: StreamFinal, TS: 5, Data: EventData{Result: &Result{
		Payloads: []Payload{{Text: "pong"}},
		Meta: Meta{DurationMs: 3, PendingToolCalls: []PendingCall{{ID: "c", Name: "n", Arguments: "{}"}}, Consumed: []ConsumedRun{{RunID: "r0"}},
			AgentMeta: &AgentMeta{Usage: &UsageMeta{Input: 1, Cost: &CostMeta{Total: 0.5}}}, Session: &SessionState{Turns: 2}},
	}}})
	if !ok {
		t.Fatal("appendEvent left the event to the library")
	}
	for n := range len(full) {
		var e Event
		if readEvent(full[:n], &e) {
			t.Fatalf("readEvent took the first %d of %d bytes", n, len(full))
		}
	}

	b := mpw.Str([]byte{0x81}, "data")
	b = mpw.Str(append(b, 0x81), "result")
	b = mpw.Str(append(b, 0x81), "payloads")
	b = append(b, 0xdd, 0x00, 0x40, 0x00, 0x00) // an array of 1<<22 elements, then nothing
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var e Event
	if readEvent(b, &e) {
		t.Fatal("readEvent took an array longer than its bytes")
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("readEvent allocated %d bytes for an array its %d bytes cannot hold", grew, len(b))
	}
}
