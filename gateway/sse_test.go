package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
)

// TestStreamLifecycleGoesWithNext: a streamed send's lifecycle start
// event is held for the run's first output, and its end for the run's
// final, each going to the connection in the same write as what it waited
// for, not a write of its own; the stream is whole and in order.
func TestStreamLifecycleGoesWithNext(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	// Held until what they wait for comes, however slow the machine: a
	// release by the timer would split the write this test looks for.
	b.srv.lifeHold = time.Minute
	written := recordWrites(t, b)
	for i := range 3 {
		written() // the last turn's
		resp := b.do(t, "acme", "POST", "/api/sessions/acme:e/messages", `{"text":"hello","stream":true}`)
		evs, err := readSSE(resp.Body, nil)
		resp.Body.Close()
		if err != nil || replyOf(t, evs) != "echo: hello" {
			t.Fatalf("turn %d: stream: %v, %d events", i, err, len(evs))
		}
		if n := len(evs); n < 2 || evs[n-1].event != "final" || evs[n-2].event != events.StreamLifecycle || !strings.Contains(evs[n-2].data, `"phase":"end"`) {
			t.Fatalf("turn %d: the stream does not end with the lifecycle end and the final: %+v", i, evs)
		}
		var first, final []byte
		for _, w := range written() {
			if first == nil && bytes.Contains(w, []byte("event: assistant\n")) {
				first = w
			}
			if bytes.Contains(w, []byte("event: final\n")) {
				final = w
			}
		}
		if !bytes.Contains(first, []byte(`"phase":"start"`)) {
			t.Fatalf("turn %d: the first output went out without the lifecycle start before it:\n%s", i, first)
		}
		if !bytes.Contains(final, []byte(`"phase":"end"`)) {
			t.Fatalf("turn %d: the final went out without the lifecycle end before it:\n%s", i, final)
		}
	}
}

// BenchmarkEventFrame is the per-event path of a run's stream: an
// assistant delta encoded as a server-sent event into the stream's
// buffer, the buffer written out every fourth event.
func BenchmarkEventFrame(b *testing.B) {
	ev := &events.Event{V: 1, SessionKey: "acme:bench", RunID: "42", Seq: 7, Stream: events.StreamAssistant, TS: 1700000000000,
		Data: events.EventData{Delta: "a token or two", Text: "so far, a token or two"}}
	sb := sseBufs.Get().(*sseBuf)
	defer func() { sb.buf.Reset(); sseBufs.Put(sb) }() // follow takes pooled buffers empty
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := appendEvent(&sb.buf, sb.enc, ev); err != nil {
			b.Fatal(err)
		}
		if i%4 == 3 {
			sb.buf.Reset()
		}
	}
}

// TestAppendEvent: an event's frame is its seq, stream and JSON, as
// json.Marshal writes the event.
func TestAppendEvent(t *testing.T) {
	t.Parallel()
	ev := &events.Event{V: 1, SessionKey: "acme:x", RunID: "3", Seq: 12, Stream: events.StreamAssistant, Data: events.EventData{Delta: "<a&b>", Text: "<a&b>"}}
	j, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	sb := sseBufs.Get().(*sseBuf)
	defer func() { sb.buf.Reset(); sseBufs.Put(sb) }() // follow takes pooled buffers empty
	sb.buf.Reset()
	if err := appendEvent(&sb.buf, sb.enc, ev); err != nil {
		t.Fatal(err)
	}
	if got, want := sb.buf.String(), "id: 12\nevent: assistant\ndata: "+string(j)+"\n\n"; got != want {
		t.Fatalf("frame %q, want %q", got, want)
	}
}
