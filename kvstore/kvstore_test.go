package kvstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
)

type bundle struct {
	lanes *Lanes
	js    jetstream.JetStream
}

// leaseOutlivesTest is the lease TTL of tests that never wait for a lease
// to expire: a short one ran out under load while a test still wrote.
const leaseOutlivesTest = 10 * time.Minute

func setup(t *testing.T, ttl time.Duration) *bundle {
	t.Helper()
	return setupWith(t, Config{LeaseTTL: ttl, MarkerTTL: time.Second})
}

// setupWith opens lanes of cfg on a server of their own.
func setupWith(t *testing.T, cfg Config) *bundle {
	t.Helper()
	js := connect(t)
	lanes, err := Open(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{lanes: lanes, js: js}
}

// connect starts a server and returns a JetStream client on a connection
// to it (js.Conn(); its ConnectedUrl is the server's).
func connect(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	return js
}

// TestOpenSetsDirectGet: reads must come from the stream leader. A
// single-replica bucket (and journal) serves Direct Get, since its only
// server is the leader, and a bucket an older worker made without it is
// switched over; a replicated one never does (a lagging replica could
// answer an ownership read: TestLeaseConflictsOnReplicatedBucket).
func TestOpenSetsDirectGet(t *testing.T) {
	t.Parallel()
	t.Run("one replica", func(t *testing.T) {
		t.Parallel()
		srv := natstest.Start(t)
		js := natstest.JetStream(t, srv.URL)
		// As a worker from before this change left it: no Direct Get.
		if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: DefaultBucket, History: 1,
			LimitMarkerTTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		st, _ := js.Stream(t.Context(), "KV_"+DefaultBucket)
		cfg := st.CachedInfo().Config
		cfg.AllowDirect = false
		if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		for range 2 { // a second worker starting keeps it
			if _, err := Open(t.Context(), js, Config{LeaseTTL: time.Second}); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"KV_" + DefaultBucket, StepsStream} {
				st, err := js.Stream(t.Context(), name)
				if err != nil {
					t.Fatal(err)
				}
				if !st.CachedInfo().Config.AllowDirect {
					t.Errorf("%s (one replica) does not serve Direct Get", name)
				}
			}
		}
	})
}

func TestLeaseExclusiveAndFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, 2*time.Second)
	ctx := t.Context()
	a, err := b.lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "b"}); !errors.Is(err, ErrHeld) {
		t.Fatalf("second acquire err = %v, want ErrHeld", err)
	}
	if info, ok, _ := b.lanes.Holder(ctx, "alice"); !ok || info.Worker != "a" {
		t.Fatalf("holder = %+v %v", info, ok)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	rec := Record{InboundSeq: 1, RunID: "1", SessionID: "s1", Entries: []message.Entry{{Type: message.EntryMessage, ID: "aaaaaaaa",
		Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("hi")}}}}
	if _, err := a.PutRecord(ctx, rec); err != nil {
		t.Fatal(err)
	}
	// A's lease expires (it stops renewing, like a paused zombie); B takes
	// over once the server's expiry marker reaches a watcher of the key.
	w, err := b.lanes.kv.Watch(ctx, "alice.lease", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expiry, cancel := context.WithTimeout(ctx, 30*time.Second) // detects a hang only
	defer cancel()
	for expired := false; !expired; {
		select {
		case e := <-w.Updates():
			expired = e != nil && e.Operation() != jetstream.KeyValuePut
		case <-expiry.Done():
			t.Fatal("the lease never expired")
		}
	}
	bl, err := b.lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "b"})
	if err != nil {
		t.Fatalf("takeover after expiry: %v", err)
	}
	// The zombie's writes and renewals are rejected by the server.
	rec.Entries[0].ID = "zzzzzzzz"
	if _, err := a.PutRecord(ctx, rec); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("zombie record write err = %v, want ErrLeaseLost", err)
	}
	if err := a.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("zombie renew err = %v, want ErrLeaseLost", err)
	}
	// The zombie's release must not free B's lease.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, ok, _ := b.lanes.Holder(ctx, "alice"); !ok || info.Worker != "b" {
		t.Fatalf("after zombie release holder = %+v %v, want b", info, ok)
	}
	c, err := b.lanes.Cursor(ctx, "alice")
	if err != nil || c.Seq != 1 {
		t.Fatalf("cursor = %+v %v, want the zombie-free record's seq 1", c, err)
	}
	// B re-runs turn 1: the record is replaced, not duplicated.
	rec.Entries[0].ID = "bbbbbbbb"
	if _, err := bl.PutRecord(ctx, rec); err != nil {
		t.Fatal(err)
	}
	recs, err := b.lanes.Records(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Entries[0].ID != "bbbbbbbb" {
		t.Fatalf("records = %+v", recs)
	}
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Released: anyone can take it at once.
	cl, err := b.lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "c"})
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	_ = cl.Release(ctx)
}

func TestRecordsOrderAndEmpty(t *testing.T) {
	t.Parallel()
	// The lease outlives the test: it is never renewed while 300 writes
	// go by, which took over 5 s under -race at a load of 25.
	b := setup(t, leaseOutlivesTest)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // 300 writes on a busy box
	defer cancel()
	recs, err := b.lanes.Records(ctx, "nobody")
	if err != nil || len(recs) != 0 {
		t.Fatalf("empty lane records = %v, %v", recs, err)
	}
	l, err := b.lanes.Acquire(ctx, "=YS5i", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 300; i++ {
		if _, err := l.PutRecord(ctx, Record{InboundSeq: i * 10}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err = b.lanes.Records(ctx, "=YS5i")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := b.lanes.Cursor(ctx, "=YS5i"); err != nil || c.Seq != 3000 {
		t.Fatalf("cursor = %+v, %v; want the newest record's seq 3000", c, err)
	}
	if len(recs) != 300 {
		t.Fatalf("got %d records, want 300", len(recs))
	}
	for i, r := range recs {
		if r.InboundSeq != uint64(i+1)*10 {
			t.Fatalf("record %d has seq %d", i, r.InboundSeq)
		}
	}
}
