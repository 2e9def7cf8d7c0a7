package sessionindex

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestNewestShortBatches: a Direct Get batch the server cuts short at its
// bytes' limit (its MaxPending; here every batch's max_bytes is set to 1,
// so each holds one entry) is not the end of the stream: its end of
// batch says what is left, and the page reads on. It listed the first
// entry of each window only.
func TestNewestShortBatches(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	ctx := t.Context()
	x, _, err := Ensure(ctx, js, Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close() })
	const n = 100
	for i := range n {
		subj, err := Subject(fmt.Sprintf("s%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, subj, []byte(`{"run":"1"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// The index's batches go through a relay that asks the server the
	// same with max_bytes 1; the server answers the index's inbox.
	relay, direct := natstest.Connect(t, srv.URL), x.api
	sub, err := relay.Subscribe("relay.direct", func(m *nats.Msg) {
		var req map[string]any
		if err := json.Unmarshal(m.Data, &req); err != nil {
			return
		}
		req["max_bytes"] = 1
		body, _ := json.Marshal(req)
		_ = relay.PublishRequest(direct, m.Reply, body)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	x.api = "relay.direct"
	p, err := x.Newest(ctx, Query{Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != n || p.Read != n {
		t.Fatalf("listed %d entries (read %d), want %d", len(p.Entries), p.Read, n)
	}
	for i, e := range p.Entries {
		if want := fmt.Sprintf("s%03d", n-1-i); e.Key != want {
			t.Fatalf("entry %d is %s, want %s", i, e.Key, want)
		}
	}
}
