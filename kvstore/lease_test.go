package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestLeaseConflictsOnReplicatedBucket: on an R3 bucket the server refuses a
// conditional write with 10164 while another one on the same key is in
// flight. Losing such a race is "held" for an acquirer, and it is never
// "lease lost" for the owner whose renewal or fenced write met an acquirer's
// attempt.
func TestLeaseConflictsOnReplicatedBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	t.Parallel()
	cl := natstest.StartCluster(t, 3)
	js := natstest.JetStream(t, cl.URL(), jetstream.WithDefaultTimeout(30*time.Second))
	lanes := openReplicated(t, js, Config{Replicas: 3, LeaseTTL: 30 * time.Second, MarkerTTL: time.Minute})
	for _, name := range []string{"KV_" + DefaultBucket, StepsStream} {
		st, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if st.CachedInfo().Config.AllowDirect {
			t.Fatalf("%s at R3 allows Direct Get: ownership reads could come from a lagging replica", name)
		}
	}
	const racers = 6

	t.Run("racing acquirers after a release", func(t *testing.T) {
		ctx := t.Context()
		var raw []error
		for round := range 20 {
			// Round 0 races for a key never written; the others race right
			// after a release, with the purge marker in place, where
			// kv.Create's second try returns the server's error unwrapped.
			if round > 0 {
				l, err := lanes.Acquire(ctx, "race", LeaseInfo{Worker: "owner", Acquired: int64(round)})
				if err != nil {
					t.Fatalf("round %d: acquire before release: %v", round, err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var (
				mu      sync.Mutex
				winners []*Lease
				wg      sync.WaitGroup
				start   = make(chan struct{})
			)
			for i := range racers {
				wg.Go(func() {
					<-start
					l, err := lanes.Acquire(ctx, "race", LeaseInfo{Worker: fmt.Sprintf("w%d", i), Acquired: int64(round)})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						winners = append(winners, l)
					case !errors.Is(err, ErrHeld):
						raw = append(raw, err)
					}
				})
			}
			close(start)
			wg.Wait()
			if len(winners) != 1 {
				t.Fatalf("round %d: %d winners, want 1 (other errors: %v)", round, len(winners), raw)
			}
			if err := winners[0].Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if len(raw) > 0 {
			t.Fatalf("%d lost races were errors instead of ErrHeld, e.g. %v", len(raw), raw[0])
		}
	})

	t.Run("owner writes while others try to acquire", func(t *testing.T) {
		ctx := t.Context()
		owner, err := lanes.Acquire(ctx, "busy", LeaseInfo{Worker: "owner"})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := lanes.Acquire(ctx, "busy", LeaseInfo{Worker: fmt.Sprintf("w%d", i)}); !errors.Is(err, ErrHeld) {
						t.Errorf("acquire of a held lane: %v, want ErrHeld", err)
						return
					}
				}
			})
		}
		for i := range 150 {
			var err error
			if i%2 == 0 {
				err = owner.Renew(ctx)
			} else {
				_, err = owner.PutRecord(ctx, Record{InboundSeq: uint64(i)})
			}
			if err != nil {
				close(stop)
				wg.Wait()
				t.Fatalf("write %d of the live owner: %v", i, err)
			}
		}
		close(stop)
		wg.Wait()
		if err := owner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, held, _ := lanes.Holder(ctx, "busy"); held {
			t.Fatal("the lease is still held after its release")
		}
	})
}

// TestRenewWhoseAnswerWasLost: a renewal stored by the server whose answer
// never came back (a timeout in a leader change) leaves the owner with an
// old revision. The next write finds the lease key still holding its own
// value and adopts the new revision instead of giving the lane up.
func TestRenewWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	b := setup(t, leaseOutlivesTest)
	ctx := t.Context()
	l, err := b.lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "a", Acquired: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The renewal as the server stored it, without l learning its revision.
	if _, err := b.js.Publish(ctx, b.lanes.prefix+leaseKey("alice"), l.value,
		jetstream.WithExpectLastSequencePerSubject(l.Revision()), jetstream.WithMsgTTL(leaseOutlivesTest)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.PutRecord(ctx, Record{InboundSeq: 1}); err != nil {
		t.Fatalf("write after a renewal with a lost answer: %v", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew after a renewal with a lost answer: %v", err)
	}
	// Another owner's value is never adopted.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := b.lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "b", Acquired: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.PutRecord(ctx, Record{InboundSeq: 2}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("write through a released lease: %v, want ErrLeaseLost", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// openReplicated opens the lanes bucket on a fresh in-process cluster
// (see natstest.Settle), then waits until the bucket's group has a leader
// that takes writes.
func openReplicated(t *testing.T, js jetstream.JetStream, cfg Config) *Lanes {
	t.Helper()
	var l *Lanes
	natstest.Settle(t, func(ctx context.Context) (err error) {
		l, err = Open(ctx, js, cfg)
		return err
	})
	natstest.WaitLeader(t, l.Stream())
	natstest.WaitWritable(t, js, l.Stream())
	return l
}

// TestLeaseState: a reader sees who holds a lane, when the lease was last
// renewed and for how long (the writer's TTL, whatever the reader's
// configuration), when it counts as overdue, and, once a lease lapsed
// unreleased, when; a released lane shows nothing.
func TestLeaseState(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	ctx := t.Context()
	lanes, err := Open(ctx, js, Config{LeaseTTL: time.Second, MarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := Bind(ctx, js, "") // configured with the default 30 s TTL
	if err != nil {
		t.Fatal(err)
	}
	state := func() LeaseState {
		t.Helper()
		st, err := reader.Lease(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := state(); st.Held || !st.Lapsed.IsZero() {
		t.Fatalf("a lane never held: %+v", st)
	}
	l, err := lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "w1", Acquired: 7})
	if err != nil {
		t.Fatal(err)
	}
	st := state()
	if !st.Held || st.Holder.Worker != "w1" || st.Holder.Acquired != 7 || st.TTL != time.Second || st.Renewed.IsZero() {
		t.Fatalf("a held lane: %+v", st)
	}
	if st.Overdue(st.Renewed.Add(st.TTL/2)) || !st.Overdue(st.Renewed.Add(st.TTL/2+time.Millisecond)) || !st.Expires().Equal(st.Renewed.Add(time.Second)) {
		t.Fatalf("overdue after half the TTL without a renewal: %+v", st)
	}
	for _, c := range []struct {
		worker string
		at     time.Time
		want   Holding
	}{
		{"w1", st.Renewed, HoldingLive},
		{"w1", st.Renewed.Add(st.TTL/2 + time.Millisecond), HoldingUnresponsive},
		{"w9", st.Renewed, HoldingLapsed}, // another worker's entry: the lane is w1's now
	} {
		if got := st.HeldBy(c.worker, c.at); got != c.want {
			t.Errorf("HeldBy(%s, %v after the renewal) = %s, want %s", c.worker, c.at.Sub(st.Renewed), got, c.want)
		}
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if renewed := state(); !renewed.Held || !renewed.Renewed.After(st.Renewed) || renewed.TTL != time.Second {
		t.Fatalf("after a renewal: %+v, before %+v", renewed, st)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st := state(); st.Held || !st.Lapsed.IsZero() {
		t.Fatalf("a released lane: %+v", st)
	}

	// A lease nobody renews lapses: the server's marker says when.
	w, err := lanes.kv.Watch(ctx, "alice.lease", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "w2"}); err != nil {
		t.Fatal(err)
	}
	expiry, cancel := context.WithTimeout(ctx, 30*time.Second) // detects a hang only
	defer cancel()
	for lapsed := false; !lapsed; {
		select {
		case e := <-w.Updates():
			lapsed = e != nil && e.Operation() != jetstream.KeyValuePut
		case <-expiry.Done():
			t.Fatal("the lease never lapsed")
		}
	}
	if st := state(); st.Held || st.Lapsed.IsZero() || st.HeldBy("w2", time.Now()) != HoldingLapsed {
		t.Fatalf("a lapsed lease: %+v", st)
	}
}

// openProcess opens the lanes bucket on a connection of its own to url, as
// a worker process would (its own remembered release markers), with a
// lease that outlives the test and a minute's markers.
func openProcess(t *testing.T, url string) (*Lanes, *nats.Conn) {
	t.Helper()
	js := natstest.JetStream(t, url)
	nc := js.Conn()
	l, err := Open(t.Context(), js, Config{LeaseTTL: leaseOutlivesTest, MarkerTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return l, nc
}

// taker returns a function that acquires lane token through l as worker
// who, failing the test if it cannot.
func taker(t *testing.T, token string) func(l *Lanes, who string) *Lease {
	return func(l *Lanes, who string) *Lease {
		t.Helper()
		lease, err := l.Acquire(t.Context(), token, LeaseInfo{Worker: who})
		if err != nil {
			t.Fatalf("%s acquire: %v", who, err)
		}
		return lease
	}
}

// TestReacquireAfterRelease: a process that released a lane takes it again
// in one write (it expects its own release marker) instead of kv.Create's
// refused write, read and write; a marker someone else moved past since
// (another owner took the lane, and held or released it) is found out, and
// the lane is then decided as any other: held (ErrHeld) or taken.
func TestReacquireAfterRelease(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	a, anc := openProcess(t, srv.URL)
	b, _ := openProcess(t, srv.URL)
	ctx := t.Context()
	take := taker(t, "carol")
	release := func(l *Lease) {
		t.Helper()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	release(take(a, "a"))

	sent := anc.Stats().OutMsgs
	again := take(a, "a")
	if n := anc.Stats().OutMsgs - sent; n != 1 {
		t.Errorf("taking back a lane this process released sent %d messages, want 1 write", n)
	}
	if _, err := again.PutRecord(ctx, Record{InboundSeq: 1}); err != nil {
		t.Fatalf("write through the lease taken back: %v", err)
	}
	release(again)

	// b takes the lane after a's release: a's marker is stale, and a finds
	// the lane held.
	held := take(b, "b")
	if _, err := a.Acquire(ctx, "carol", LeaseInfo{Worker: "a"}); !errors.Is(err, ErrHeld) {
		t.Fatalf("acquire of a lane another process took since: %v, want ErrHeld", err)
	}
	if _, err := again.PutRecord(ctx, Record{InboundSeq: 2}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("write through a released lease: %v, want ErrLeaseLost", err)
	}
	release(held)
	release(take(a, "a")) // b's marker: a's own is forgotten, the lane is free
	release(take(b, "b"))
	l := take(a, "a")
	// A lease given up (its worker declared dead) is not taken back in one
	// write: the survivors are the ones meant to take the lane.
	if err := l.GiveUp(ctx); err != nil {
		t.Fatal(err)
	}
	sent = anc.Stats().OutMsgs
	take(a, "a")
	if n := anc.Stats().OutMsgs - sent; n == 1 {
		t.Error("a lane given up was taken back in one write, as after a release")
	}
}

// TestReleasedRevsForgetExpiredMarkers: a release marker remembered for
// MarkerTTL or longer is not expected (the server removed it, so the write
// would be refused and cost an extra round trip); a fresh one is, once.
func TestReleasedRevsForgetExpiredMarkers(t *testing.T) {
	t.Parallel()
	var r releasedRevs
	at := time.Unix(1000, 0)
	r.put("carol", 7, at, &Cursor{Seq: 3})
	r.put("dave", 9, at, &Cursor{Seq: 4})
	if got, left := r.take("carol", at.Add(time.Minute-time.Millisecond), time.Minute); got != 7 || left == nil || left.Seq != 3 {
		t.Errorf("a marker younger than its TTL: %d %v, want 7 and its cursor", got, left)
	}
	if got, left := r.take("carol", at, time.Minute); got != 0 || left != nil {
		t.Errorf("a marker taken already: %d %v, want 0 and no cursor", got, left)
	}
	if got, left := r.take("dave", at.Add(time.Minute), time.Minute); got != 0 || left != nil {
		t.Errorf("a marker as old as its TTL: %d %v, want 0 and no cursor", got, left)
	}
}

// TestLeftOnlyWhenUntouched: a lane taken back over this process's own
// release hands on the cursor that release named (Lease.Left), and only
// then: a lease created anew, a release that named no cursor, and above
// all another owner's lease in between (it may have written records, and
// here does) leave Left unknown, so the owner reads the cursor.
func TestLeftOnlyWhenUntouched(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	a, _ := openProcess(t, srv.URL)
	b, _ := openProcess(t, srv.URL)
	ctx := t.Context()
	take := taker(t, "erin")
	lease := take(a, "a")
	if _, ok := lease.Left(); ok {
		t.Fatal("a lease created anew knows a cursor")
	}
	w, err := lease.PutRecord(ctx, Record{InboundSeq: 5, SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.ReleaseAt(ctx, Cursor{Seq: 5, SessionID: "s", Stored: w.Seq}); err != nil {
		t.Fatal(err)
	}
	lease = take(a, "a")
	if c, ok := lease.Left(); !ok || c.Seq != 5 || c.Stored != w.Seq {
		t.Fatalf("taken back over its own release: Left %+v %v, want inbound 5 at %d", c, ok, w.Seq)
	}

	// Another owner in between, which moves the lane on: a's marker is
	// written over, and a must read what b left.
	if err := lease.ReleaseAt(ctx, Cursor{Seq: 5, SessionID: "s", Stored: w.Seq}); err != nil {
		t.Fatal(err)
	}
	other := take(b, "b")
	if _, err := other.PutRecord(ctx, Record{InboundSeq: 6, SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease = take(a, "a")
	if c, ok := lease.Left(); ok {
		t.Fatalf("taken after another owner's lease: Left %+v, want unknown (another owner wrote inbound 6)", c)
	}
	if c, err := a.Cursor(ctx, "erin"); err != nil || c.Seq != 6 {
		t.Fatalf("cursor read: %+v %v, want inbound 6", c, err)
	}

	// Another owner that wrote nothing: the marker is still written over,
	// which is all a can know.
	if err := lease.ReleaseAt(ctx, Cursor{Seq: 6, SessionID: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := take(b, "b").Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease = take(a, "a")
	if _, ok := lease.Left(); ok {
		t.Fatal("taken after another owner's lease that wrote nothing: Left known, want unknown")
	}

	// A release that names no cursor.
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := take(a, "a").Left(); ok {
		t.Fatal("taken back over a release that named no cursor: Left known")
	}
}
