package wiretest

import (
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// Outcome checks the result of one table case of an adapter test: with a
// reason, a failure of that reason and stop reason error; without one, no
// error. check, when not nil, then looks at msg.
func Outcome(t *testing.T, msg message.Message, err error, reason provider.Reason, check func(*testing.T, message.Message)) {
	t.Helper()
	if reason != "" && (provider.ReasonOf(err) != reason || msg.StopReason != message.StopError) {
		t.Errorf("got %v (%s), want %s", err, msg.StopReason, reason)
	}
	if reason == "" && err != nil {
		t.Fatal(err)
	}
	if check != nil {
		check(t, msg)
	}
}

// Bench measures one adapter reading body, served whole by a local server:
// MB/s of SSE decoded and assembled and allocations per reply, which must
// be a single block. setup returns the adapter and the request for the
// server at url.
func Bench(b *testing.B, body []byte, setup func(url string) (provider.Provider, *provider.Request)) {
	b.Helper()
	srv := ServeBody(b, 200, "text/event-stream", body, 0)
	p, req := setup(srv.URL)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		msg, err := p.Stream(b.Context(), req, func(provider.Event) {})
		if err != nil || len(msg.Content.Blocks) != 1 {
			b.Fatal(err)
		}
	}
}
