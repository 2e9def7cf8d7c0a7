package admin_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
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
	js := natstest.JetStream(t, "nats://"+p.Addr)
	nc := js.Conn()
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

// TestDeadListStreamGoneWhileStalled: a listing whose fetch outwaits a
// slow server and whose new consumer cannot be made (here the dead-letter
// stream was deleted meanwhile) answers the cause. The deferred delete of
// the listing's consumer called a method of the failed open's nil
// consumer: the handler panicked, and the request had no answer. The
// answer says where the scan met the cause.
func TestDeadListStreamGoneWhileStalled(t *testing.T) {
	t.Parallel()
	b := stores(t, 60*time.Second)
	b.deadLetter(t, "poison", "agent.in.alice", 1, `{"text":"boom"}`)
	p := natstest.StartStallProxy(t, b.nc.ConnectedUrl(), []byte("CONSUMER.MSG.NEXT"), 7*time.Second)
	js := natstest.JetStream(t, "nats://"+p.Addr)
	nc := js.Conn()
	streams, err := lanes.EnsureStreams(b.ctx, js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config(t)
	cfg.JS, cfg.Inbound, cfg.Events, cfg.Dead = js, streams.Inbound, streams.Events, streams.Dead
	svc, err := admin.Serve(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	p.Arm()
	answered := make(chan error, 1)
	go func() {
		msg, err := b.nc.RequestWithContext(b.ctx, admin.Subject(admin.OpDeadList), []byte("{}"))
		if err == nil && msg.Header.Get(micro.ErrorCodeHeader) == "" {
			err = fmt.Errorf("listed %q", msg.Data)
		} else if err == nil {
			err = errors.New(msg.Header.Get(micro.ErrorHeader))
		}
		answered <- err
	}()
	select {
	case <-p.Began():
	case <-b.ctx.Done():
		t.Fatal("the listing did not fetch")
	}
	if err := b.js.DeleteStream(b.ctx, events.DeadStream); err != nil {
		t.Fatal(err)
	}
	// The cause, and where the scan met it: the consumer that reads on
	// from the first letter, none received (it answered the cause
	// alone).
	want := "admin: scan dead letters: a consumer of " + events.DeadPrefix + "> from 1: "
	if err := <-answered; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "stream not found") {
		t.Fatalf("answered %v, want %q and the cause: stream not found", err, want)
	}
}
