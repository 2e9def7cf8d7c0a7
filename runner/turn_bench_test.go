package runner

import (
	"context"
	"strconv"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider/openai"
)

// BenchmarkShortTurn is the runner's part of lanebench's conc64 turn
// (issue 36 item 2): a short session's turn (two earlier exchanges)
// through the Chat Completions adapter against a local endpoint answering
// "pong" at once, with the events it streams. Its allocations per
// operation are the runner's and the adapter's per turn (the endpoint's
// included); the fleet adds the lane, the store and the client.
func BenchmarkShortTurn(b *testing.B) {
	srv := pongServer(b)
	r, err := New(Config{DefaultModel: "acme/m1", Resolver: urlResolver{url: srv.URL, prov: openai.NewCompletions(openai.Config{})}})
	if err != nil {
		b.Fatal(err)
	}
	hist := pingPongHistory(4)
	in := &events.Inbound{Text: "ping"}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		key := "s" + strconv.Itoa(n%64)
		if _, err := r.Run(context.Background(), Input{SessionKey: key, SessionID: key, RunID: "r" + strconv.Itoa(n), Inbound: in, History: hist}, nopSink{}); err != nil {
			b.Fatal(err)
		}
	}
}
