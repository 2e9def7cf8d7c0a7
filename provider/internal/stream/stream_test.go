package stream_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

var model = provider.Model{ID: "m", Provider: "p", API: "a", Cost: provider.ModelCost{Input: 2, Output: 4, CacheRead: 1, CacheWrite: 3}}

func TestBuilder(t *testing.T) {
	t.Parallel()
	var types []string
	b := stream.NewBuilder(model, time.UnixMilli(42), func(e provider.Event) { types = append(types, string(e.Type)) })
	th := b.BeginThinking()
	b.Append(th, "hm")
	b.Block(th).ThinkingSignature = "sig"
	tx := b.BeginText()
	b.Append(tx, "he")
	b.Append(tx, "llo")
	b.Append(tx, "") // ignored
	tc := b.BeginToolCall("id1", "read")
	b.Append(tc, `{"a":`)
	b.Append(tc, `1}`)
	bad := b.BeginToolCall("id2", "read")
	b.Append(bad, `{"a":`)
	b.SetUsage(message.Usage{Input: 1e6, Output: 1e6, CacheRead: 1e6, CacheWrite: 1e6})
	msg := b.Done(message.StopToolUse)
	want := "start thinking_start thinking_delta text_start text_delta text_delta toolcall_start toolcall_delta toolcall_delta toolcall_start toolcall_delta thinking_end text_end toolcall_end toolcall_end done"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	c := msg.Content.Blocks
	if c[0].Thinking != "hm" || c[0].ThinkingSignature != "sig" || c[1].Text != "hello" || c[2].Arguments["a"] != float64(1) || len(c[3].Arguments) != 0 {
		t.Errorf("blocks %+v", c)
	}
	if msg.Timestamp != 42 || msg.API != "a" || msg.Model != "m" || msg.StopReason != message.StopToolUse {
		t.Errorf("message %+v", msg)
	}
	if msg.Usage.Cost.Total != 10 || msg.Usage.TotalTokens != 4e6 {
		t.Errorf("usage %+v", msg.Usage)
	}
}

func TestFail(t *testing.T) {
	t.Parallel()
	var last provider.Event
	b := stream.NewBuilder(model, time.Now(), func(e provider.Event) { last = e })
	i := b.BeginText()
	b.Append(i, "part")
	msg, err := b.Fail(&provider.Error{Reason: provider.ReasonAborted, Message: "Request was aborted"})
	if msg.StopReason != message.StopAborted || msg.Content.Text() != "part" || msg.ErrorMessage != "Request was aborted" || provider.ReasonOf(err) != provider.ReasonAborted {
		t.Errorf("%+v %v", msg, err)
	}
	if last.Type != provider.EventError || last.Reason != message.StopAborted || last.Message.Content.Text() != "part" {
		t.Errorf("last event %+v", last)
	}
	msg, _ = stream.NewBuilder(model, time.Now(), nil).Fail(&provider.Error{Reason: provider.ReasonRateLimit})
	if msg.StopReason != message.StopError || msg.ErrorMessage == "" || msg.Usage == nil {
		t.Errorf("%+v", msg)
	}
	msg, _ = stream.NewBuilder(model, time.Now(), nil).Fail(&provider.Error{Reason: provider.ReasonOverloaded, Status: 529, Message: "Overloaded"})
	if msg.ErrorMessage != "529 Overloaded" {
		t.Errorf("error message %q", msg.ErrorMessage)
	}
}

type blockingBody struct{ ctx context.Context }

func (b blockingBody) Read([]byte) (int, error) { <-b.ctx.Done(); return 0, b.ctx.Err() }
func (blockingBody) Close() error               { return nil }

func TestWatchAndClassify(t *testing.T) {
	t.Parallel()
	w := stream.NewWatch(t.Context(), 20*time.Millisecond)
	defer w.Stop()
	_, err := io.ReadAll(w.Body(blockingBody{w.Context()}))
	pe := stream.Classify(t.Context(), w, "test", err)
	if pe.Reason != provider.ReasonTimeout || !strings.Contains(pe.Message, "stalled") || !errors.Is(pe.Err, stream.ErrStalled) {
		t.Errorf("stall: %+v", pe)
	}

	parent, cancel := context.WithCancel(t.Context())
	w2 := stream.NewWatch(parent, time.Minute)
	defer w2.Stop()
	cancel()
	if pe := stream.Classify(parent, w2, "test", context.Canceled); pe.Reason != provider.ReasonAborted {
		t.Errorf("abort: %+v", pe)
	}
	if pe := stream.Classify(t.Context(), nil, "test", errors.New("weird")); pe.Reason != provider.ReasonTimeout {
		t.Errorf("unknown transport failure: %+v", pe)
	}
	given := &provider.Error{Reason: provider.ReasonBilling}
	if pe := stream.Classify(t.Context(), nil, "test", given); pe != given {
		t.Errorf("classified error replaced")
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	for in, n := range map[string]int{``: 0, `{}`: 0, `{"a":1,"b":[1]}`: 2, `[1]`: 0, `{"a":`: 0, `null`: 0} {
		if got := stream.ParseArgs([]byte(in)); got == nil || len(got) != n {
			t.Errorf("%q: %v", in, got)
		}
	}
}

func TestDrain(t *testing.T) {
	t.Parallel()
	body := "data: 1\n\ndata: 2\n\ndata: 3\n\n"
	var got []string
	handle := func(ev sse.Event) *provider.Error { got = append(got, string(ev.Data)); return nil }
	stop := func() bool { return len(got) == 2 }
	if perr := stream.Drain(t.Context(), nil, "x", strings.NewReader(body), stop, nil, handle); perr != nil || strings.Join(got, ",") != "1,2" {
		t.Fatalf("stop: %v %v", got, perr)
	}
	got = nil
	if perr := stream.Drain(t.Context(), nil, "x", strings.NewReader(body), nil, nil, handle); perr != nil || len(got) != 3 {
		t.Fatalf("EOF: %v %v", got, perr)
	}
	boom := stream.Protocol("boom")
	if perr := stream.Drain(t.Context(), nil, "x", strings.NewReader(body), nil, nil, func(sse.Event) *provider.Error { return boom }); perr != boom {
		t.Fatalf("handle error: %v", perr)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if perr := stream.Drain(ctx, nil, "x", strings.NewReader(""), nil, nil, handle); perr == nil || perr.Reason != provider.ReasonAborted {
		t.Fatalf("cancelled: %v", perr)
	}
}

// eofReader hands out its body in pieces of at most 8 bytes and records
// whether a read reached its end.
type eofReader struct {
	r   *strings.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p[:min(len(p), 8)])
	if err == io.EOF {
		e.eof = true
	}
	return n, err
}

// TestDrainTail: after the terminal event Drain reads what is left of a
// body that ends (so an HTTP/1.1 connection can go back to its pool), and
// hands none of it to the handler; with a tail longer than it reads, it
// stops without an error.
func TestDrainTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		tail string
		eof  bool
	}{
		{"short tail", "data: late\n\n: comment\n\n", true},
		{"no tail", "", true},
		{"endless tail", strings.Repeat("data: x\n\n", 100<<10), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := stream.NewWatch(t.Context(), 0)
			defer w.Stop()
			body := &eofReader{r: strings.NewReader("data: 1\n\ndata: stop\n\n" + tc.tail)}
			var got []string
			handle := func(ev sse.Event) *provider.Error { got = append(got, string(ev.Data)); return nil }
			stop := func() bool { return len(got) > 0 && got[len(got)-1] == "stop" }
			if perr := stream.Drain(t.Context(), w, "x", w.Body(io.NopCloser(body)), stop, nil, handle); perr != nil {
				t.Fatal(perr)
			}
			if strings.Join(got, ",") != "1,stop" || body.eof != tc.eof {
				t.Errorf("events %v, read to the end %v", got, body.eof)
			}
		})
	}
}

func TestScrubAndInBand(t *testing.T) {
	t.Parallel()
	key := provider.Secret("sk-123")
	e := &provider.Error{Reason: provider.ReasonTimeout, Message: "send: bad header sk-123", Err: errors.New("bad header sk-123")}
	s := stream.Scrub(e, key)
	if strings.Contains(s.Error(), "sk-123") || strings.Contains(s.Err.Error(), "sk-123") || !strings.Contains(e.Message, "sk-123") {
		t.Fatalf("scrub: %+v (original %+v)", s, e)
	}
	clean := &provider.Error{Message: "fine"}
	if stream.Scrub(clean, key) != clean {
		t.Fatal("scrub copied an error without the key")
	}
	if stream.InBand(nil, nil, "x") != nil || stream.InBand([]byte("null"), []byte(`{"error":null}`), "x") != nil {
		t.Fatal("no error field gave an error")
	}
	if stream.InBand([]byte(`{"message":"m"}`), []byte(`{"error":{"message":"m"}}`), "x") == nil {
		t.Fatal("error field ignored")
	}
}
