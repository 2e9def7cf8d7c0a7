package kvstore

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
)

// TestTakeOverFencesTheDeadOwner: a lease taken over from a dead worker's
// life makes that worker's renewal, fenced writes and release fail as
// after a lapse, and names the worker it replaced; a takeover that finds
// the lease moved on is ErrHeld. LeasesOf finds a life's leases only.
func TestTakeOverFencesTheDeadOwner(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	ctx := t.Context()
	dead, err := b.lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "dead", Life: "deadbeef00"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.lanes.Acquire(ctx, "bob", LeaseInfo{Worker: "other", Life: "0123456789"}); err != nil {
		t.Fatal(err)
	}
	held, err := b.lanes.LeasesOf(ctx, "deadbeef00")
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0].Token != "alice" || held[0].Rev != dead.Revision() || held[0].Info.Worker != "dead" {
		t.Fatalf("leases of the dead life: %+v", held)
	}
	// The dead worker renewed since the pass read its lease: the takeover
	// loses (it was not dead after all, or someone else was first).
	stale := held[0]
	if err := dead.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.lanes.TakeOver(ctx, stale, LeaseInfo{Worker: "survivor"}); !errors.Is(err, ErrHeld) {
		t.Fatalf("takeover over a renewed lease: %v, want ErrHeld", err)
	}
	held, _ = b.lanes.LeasesOf(ctx, "deadbeef00")
	if len(held) != 1 {
		t.Fatalf("leases of the dead life: %+v", held)
	}
	taken, err := b.lanes.TakeOver(ctx, held[0], LeaseInfo{Worker: "survivor", Life: "aaaaaaaaaa"})
	if err != nil {
		t.Fatal(err)
	}
	if info, ok, _ := b.lanes.Holder(ctx, "alice"); !ok || info.Worker != "survivor" || info.From != "dead" {
		t.Fatalf("holder after takeover: %+v %v", info, ok)
	}
	rec := Record{InboundSeq: 1, RunID: "1", SessionID: "s1", Entries: []message.Entry{{Type: message.EntryMessage, ID: "aaaaaaaa",
		Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("hi")}}}}
	if _, err := dead.PutRecord(ctx, rec); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the dead owner's write: %v, want ErrLeaseLost", err)
	}
	if err := dead.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the dead owner's renewal: %v, want ErrLeaseLost", err)
	}
	if err := dead.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := taken.PutRecord(ctx, rec); err != nil {
		t.Fatalf("the new owner's write: %v", err)
	}
	if held, _ := b.lanes.LeasesOf(ctx, "deadbeef00"); len(held) != 0 {
		t.Fatalf("the dead life still holds %+v", held)
	}
}

// TestLifeDeclaredDead: a life declared dead at its revision refuses its
// worker's next beat (ErrDeclaredDead); a declaration at a revision a beat
// replaced is refused; watchers see the beats and the end; a life that
// ended itself says it left.
func TestLifeDeclaredDead(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute)
	ctx := t.Context()
	v, err := OpenLiveness(ctx, b.js, LivenessConfig{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Begin(ctx, "NOT-HEX", Life{Worker: "w"}); err == nil {
		t.Fatal("a life key that is not hex was taken")
	}
	p, err := v.Begin(ctx, "0123456789abcdef", Life{Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan LifeEvent, 16)
	go func() { _ = v.Watch(ctx, func(ev LifeEvent) { events <- ev }, nil) }()
	first := <-events
	if first.Ended || first.Life.Worker != "w" {
		t.Fatalf("first event %+v", first)
	}
	if err := p.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := v.Declare(ctx, "0123456789abcdef", first.Rev); err != nil || ok {
		t.Fatalf("declared at a revision a beat replaced: %v %v", ok, err)
	}
	beat := <-events
	if ok, err := v.Declare(ctx, "0123456789abcdef", beat.Rev); err != nil || !ok {
		t.Fatalf("declare: %v %v", ok, err)
	}
	if ev := <-events; !ev.Ended {
		t.Fatalf("after the declaration: %+v", ev)
	}
	if err := p.Beat(ctx); !errors.Is(err, ErrDeclaredDead) {
		t.Fatalf("beat after the declaration: %v, want ErrDeclaredDead", err)
	}
	q, err := v.Begin(ctx, "fedcba9876543210", Life{Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	<-events
	// End's two writes, as the server took them: a watcher that lags may
	// not see the first, since the purge rolls it up.
	sub, err := b.js.Conn().SubscribeSync("$KV." + DefaultLivenessBucket + ".fedcba9876543210")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.End(ctx, Life{Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	var left Life
	if m, err := sub.NextMsgWithContext(ctx); err != nil || msgpack.Unmarshal(m.Data, &left) != nil || !left.Left || m.Header.Get("KV-Operation") != "" {
		t.Fatalf("the last write of a life that ended itself: %+v, %v", left, err)
	}
	if m, err := sub.NextMsgWithContext(ctx); err != nil || m.Header.Get("KV-Operation") != "PURGE" {
		t.Fatalf("after the last write: %v", err)
	}
	ev := <-events
	if !ev.Ended {
		// The watcher kept up: it saw the last write, then the end.
		if !ev.Life.Left {
			t.Fatalf("the last write of a life that ended itself, watched: %+v", ev)
		}
		if ev = <-events; !ev.Ended {
			t.Fatalf("after End: %+v", ev)
		}
	}
	st, err := b.js.Stream(ctx, "KV_"+DefaultLivenessBucket)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.Storage != jetstream.FileStorage || !cfg.AllowDirect {
		t.Fatalf("workers bucket: storage %v, direct %v", cfg.Storage, cfg.AllowDirect)
	}
}

// TestLeasesOfOnASlowServer: a survivor's scan for a dead life's leases
// whose fetch comes back empty because the server answered late (a
// loaded server) goes on while its consumer still counts leases pending.
// It used to take the empty fetch for the end and find none, leaving the
// dead worker's lanes to AckWait. The scan's connection goes through a
// proxy that holds what the server sends for longer than the fetch waits.
func TestLeasesOfOnASlowServer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	ctx := t.Context()
	direct, err := Open(ctx, js, Config{LeaseTTL: leaseOutlivesTest, MarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, lane := range []string{"alice", "bob", "carol"} {
		if _, err := direct.Acquire(ctx, lane, LeaseInfo{Worker: "dead", Life: "deadbeef00"}); err != nil {
			t.Fatal(err)
		}
	}
	p := natstest.StartStallProxy(t, srv.URL, []byte("CONSUMER.MSG.NEXT"), scanWait+2*time.Second)
	pjs := natstest.JetStream(t, "nats://"+p.Addr)
	slow, err := Open(ctx, pjs, Config{LeaseTTL: leaseOutlivesTest, MarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.Arm()
	held, err := slow.LeasesOf(ctx, "deadbeef00")
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 3 || !p.Stalled() {
		t.Fatalf("leases of the dead life on a slow server: %+v (stalled %v), want 3", held, p.Stalled())
	}
}
