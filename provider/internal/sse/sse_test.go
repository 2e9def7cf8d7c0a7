package sse_test

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/lanefleet/lanefleet/provider/internal/sse"
)

func TestReader(t *testing.T) {
	t.Parallel()
	body := ": comment\r\nevent: a\r\ndata: {\"x\":1}\r\n\r\n" +
		"data: one\ndata: two\nid: 7\nretry: 5\n\n" +
		"data:nospace\n\n\n\n" +
		"event: tail\ndata: last"
	type ev struct{ name, data string }
	want := []ev{{"a", `{"x":1}`}, {"", "one\ntwo"}, {"", "nospace"}, {"tail", "last"}}
	for _, r := range []io.Reader{strings.NewReader(body), iotest.OneByteReader(strings.NewReader(body))} {
		rd := sse.NewReader(r)
		var got []ev
		for {
			e, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev{string(e.Name), string(e.Data)})
		}
		if len(got) != len(want) {
			t.Fatalf("got %v", got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%d: got %v want %v", i, got[i], want[i])
			}
		}
		if rd.BytesRead() != int64(len(body)) {
			t.Errorf("bytes read %d", rd.BytesRead())
		}
	}
}

func TestReaderLongLine(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 200<<10)
	rd := sse.NewReader(strings.NewReader("data: " + big + "\n\n"))
	e, err := rd.Next()
	if err != nil || string(e.Data) != big {
		t.Fatalf("err %v len %d", err, len(e.Data))
	}
}

func TestReaderError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	rd := sse.NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)))
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Next(); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}

// TestReaderBufferReused (issue "what a new user trips over" item 14): a
// closed reader's buffer serves the next stream, so a turn's stream
// leaves no buffer behind as garbage (it was most of what a short turn
// allocated), and a reader closed twice gives its buffer back once.
func TestReaderBufferReused(t *testing.T) {
	const streams = 100
	read := func() {
		rd := sse.NewReader(strings.NewReader("data: pong\n\n"))
		if ev, err := rd.Next(); err != nil || string(ev.Data) != "pong" {
			t.Fatalf("Next = %q, %v", ev.Data, err)
		}
		rd.Close()
		rd.Close()
	}
	read() // the pool's first buffer
	allocated := testing.AllocsPerRun(streams, read)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range streams {
		read()
	}
	runtime.ReadMemStats(&after)
	// Half a buffer per stream: the race detector's pool drops a quarter
	// of what it is given back.
	if per := (after.TotalAlloc - before.TotalAlloc) / streams; per > 2<<10 {
		t.Fatalf("each stream allocated %d bytes (%.0f allocations), want its buffer reused", per, allocated)
	}
}

// TestReaderBufferSmall (issue 36 item 6): a stream holds its read
// buffer for as long as the model streams, so the buffer is a few KiB, not
// 64 KiB (which was most of what a streaming turn in flight held); a line
// longer than it still arrives whole (TestReaderLongLine).
func TestReaderBufferSmall(t *testing.T) {
	// The least of a few tries: the runtime and the test framework may
	// allocate in between too.
	least := uint64(1 << 62)
	for range 5 {
		runtime.GC() // twice: the pool's buffers are dropped
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rd := sse.NewReader(strings.NewReader("data: pong\n\n"))
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
		rd.Close()
	}
	if least > 8<<10 {
		t.Fatalf("a new reader allocated %d bytes; want a buffer of a few KiB", least)
	}
}

// BenchmarkReader reads a reply of many small deltas and a few long
// lines (a tool call's arguments in one event), as a model streams it.
func BenchmarkReader(b *testing.B) {
	var body strings.Builder
	for i := range 2000 {
		body.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"token `)
		body.WriteString(strings.Repeat("x", i%40))
		body.WriteString(`"}}]}` + "\n\n")
		if i%500 == 0 {
			body.WriteString("data: " + strings.Repeat("y", 24<<10) + "\n\n")
		}
	}
	text := body.String()
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		rd := sse.NewReader(strings.NewReader(text))
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
		}
		rd.Close()
	}
}
