package admin_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes"
)

// TestDeadListOnASlowServer: a listing whose letters come late, as from a
// loaded server, still lists them all. The service's connection goes
// through a proxy that holds what the server sends for 1.5 s once the
// service asks a consumer for its messages: the no-wait fetch it used
// gave up after the client's 1 s, and the listing came back empty with no
// more to page to. Held past a waiting fetch's own wait (scanWait and the
// client's 1 s), what the server sent is gone from that consumer (no
// acks): the listing reads on with a new one from the last letter it got.
func TestDeadListOnASlowServer(t *testing.T) {
	t.Parallel()
	for _, hold := range []time.Duration{1500 * time.Millisecond, 7 * time.Second} {
		t.Run(hold.String(), func(t *testing.T) {
			t.Parallel()
			deadListHeld(t, hold)
		})
	}
}

func deadListHeld(t *testing.T, hold time.Duration) {
	b := stores(t, 60*time.Second)
	var want []uint64
	for i := range 3 {
		want = append(want, b.deadLetter(t, "poison", "agent.in.alice", uint64(i+1), `{"text":"boom"}`))
	}
	p := natstest.StartStallProxy(t, b.nc.ConnectedUrl(), []byte("CONSUMER.MSG.NEXT"), hold)
	nc := natstest.Connect(t, "nats://"+p.Addr)
	js, _ := jetstream.New(nc)
	streams, err := lanes.EnsureStreams(b.ctx, js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := admin.Serve(nc, admin.Config{JS: js, Inbound: streams.Inbound, Events: streams.Events, Dead: streams.Dead, Runs: b.runs,
		Worker: "w-1", Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	p.Arm()
	var page admin.DeadListReply
	if err := b.request(t, admin.OpDeadList, admin.DeadListRequest{}, &page); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, l := range page.Letters {
		got = append(got, l.Seq)
	}
	if !slices.Equal(got, want) || page.More || !p.Stalled() {
		t.Fatalf("listed %v (more %v, stalled %v), want %v", got, page.More, p.Stalled(), want)
	}
}
