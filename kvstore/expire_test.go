package kvstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
)

// TestForgetIsFenced: a lease that lost its lane removes nothing; the
// lane's holder removes its records, settings and step journals, leaving no
// record for Records or Cursor, no settings and no steps; Scan tells data from lease keys and
// markers, and the retention position is compare-and-swap.
func TestForgetIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, leaseOutlivesTest)
	ctx := t.Context()
	stale, err := b.lanes.Acquire(ctx, "bob", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		rec := Record{InboundSeq: seq, RunID: "r", Entries: []message.Entry{{Type: message.EntryMessage, ID: "e",
			Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("hi")}}}}
		if _, err := stale.PutRecord(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := stale.PutSettings(ctx, []byte("s")); err != nil {
		t.Fatal(err)
	}
	if err := b.lanes.Journal("bob", 3).Put(ctx, 1, []byte("step")); err != nil {
		t.Fatal(err)
	}
	// The lane moves on without the stale owner knowing.
	if err := b.lanes.kv.Purge(ctx, leaseKey("bob")); err != nil {
		t.Fatal(err)
	}
	holder, err := b.lanes.Acquire(ctx, "bob", LeaseInfo{Worker: "b"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.lanes.Data(ctx, "bob")
	if err != nil || len(d.Keys) != 3 || d.Cursor != 2 || d.LastWrite.IsZero() {
		t.Fatalf("Data: %+v, %v; want 2 records and settings, cursor 2", d, err)
	}
	if n, err := stale.Forget(ctx, d.Keys); !errors.Is(err, ErrLeaseLost) || n != 0 {
		t.Fatalf("stale Forget: %d keys, %v; want none, ErrLeaseLost", n, err)
	}
	if recs, err := b.lanes.Records(ctx, "bob"); err != nil || len(recs) != 2 {
		t.Fatalf("after the stale Forget: %d records, %v", len(recs), err)
	}
	// Scanned in batches of two, and from the middle: the same messages
	// in order, each once.
	var data, other int
	var seqs []uint64
	for seq := uint64(1); ; {
		sts, err := b.lanes.ScanBatch(ctx, seq, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(sts) == 0 {
			break
		}
		for _, st := range sts {
			if st.Token != "bob" || st.Time.IsZero() {
				t.Fatalf("scan: token %q at %v", st.Token, st.Time)
			}
			if st.Data {
				data++
			} else {
				other++
			}
			seqs = append(seqs, st.Seq)
			seq = st.Seq + 1
		}
	}
	if data != 3 || other != 1 {
		t.Fatalf("scan: %d data, %d other messages; want 3 (records, settings) and 1 (lease)", data, other)
	}
	if !slices.IsSorted(seqs) || len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
		t.Fatalf("scan: sequences %v, want each once in order", seqs)
	}
	if tail, err := b.lanes.ScanBatch(ctx, seqs[2], 10); err != nil || len(tail) != 2 || tail[0].Seq != seqs[2] {
		t.Fatalf("scan from %d: %+v, %v; want the last two", seqs[2], tail, err)
	}
	if _, err := holder.Forget(ctx, []string{"bob.lease"}); err == nil {
		t.Fatal("Forget removed the lease")
	}
	n, err := holder.Forget(ctx, d.Keys)
	if err != nil || n != 3 {
		t.Fatalf("Forget: %d keys, %v; want 3", n, err)
	}
	if recs, err := b.lanes.Records(ctx, "bob"); err != nil || len(recs) != 0 {
		t.Fatalf("after Forget: %d records, %v", len(recs), err)
	}
	if cur, err := b.lanes.Cursor(ctx, "bob"); err != nil || cur.Seq != 0 {
		t.Fatalf("after Forget: cursor %+v, %v", cur, err)
	}
	if s, err := b.lanes.Settings(ctx, "bob"); err != nil || s != nil {
		t.Fatalf("after Forget: settings %q, %v", s, err)
	}
	if steps, err := b.lanes.Journal("bob", 3).Steps(ctx); err != nil || len(steps) != 0 {
		t.Fatalf("after Forget: steps %q, %v", steps, err)
	}
	// Nothing is left of what it wrote (purges leave no markers).
	if d, err := b.lanes.Data(ctx, "bob"); err != nil || d.Cursor != 0 || !d.LastWrite.IsZero() {
		t.Fatalf("Data after Forget: %+v, %v; want nothing written", d, err)
	}

	pos, rev, err := b.lanes.RetentionPos(ctx)
	if err != nil || pos != 0 || rev != 0 {
		t.Fatalf("no position yet: %d, %d, %v", pos, rev, err)
	}
	if err := b.lanes.SetRetentionPos(ctx, 7, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.lanes.SetRetentionPos(ctx, 5, 0); !errors.Is(err, ErrPosMoved) {
		t.Fatalf("a second first position: %v, want ErrPosMoved", err)
	}
	if pos, _, err := b.lanes.RetentionPos(ctx); err != nil || pos != 7 {
		t.Fatalf("position %d, %v; want 7", pos, err)
	}
}

// TestUntouched: a lease taken after a Data read confirms that read only
// while nothing was written to the lane in between: a record or settings
// stored by an owner that came and went (its lease written and released)
// since the read, or before the read's sequence but not seen by it, make
// it false; another lane's writes do not.
func TestUntouched(t *testing.T) {
	t.Parallel()
	b := setup(t, leaseOutlivesTest)
	ctx := t.Context()
	put := func(token string, seq uint64, settings bool) {
		t.Helper()
		l, err := b.lanes.Acquire(ctx, token, LeaseInfo{Worker: "owner"})
		if err != nil {
			t.Fatal(err)
		}
		rec := Record{InboundSeq: seq, RunID: "r", Entries: []message.Entry{{Type: message.EntryMessage, ID: "e",
			Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("hi")}}}}
		if settings {
			err = l.PutSettings(ctx, []byte("s"))
		} else {
			_, err = l.PutRecord(ctx, rec)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The release marker goes, as it has when a pass comes a TTL
		// later.
		if err := b.lanes.stream.Purge(ctx, jetstream.WithPurgeSubject(b.lanes.prefix+leaseKey(token))); err != nil {
			t.Fatal(err)
		}
	}
	take := func(token string) *Lease {
		t.Helper()
		l, err := b.lanes.Acquire(ctx, token, LeaseInfo{Worker: "pass"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Release(context.WithoutCancel(ctx)) })
		return l
	}
	for _, c := range []struct {
		name    string
		between func(token string)
		want    bool
	}{
		{"nothing between", func(string) {}, true},
		{"another lane written between", func(string) { put("other", 9, false) }, true},
		{"a record between", func(token string) { put(token, 2, false) }, false},
		{"settings between", func(token string) { put(token, 0, true) }, false},
	} {
		token := strings.ReplaceAll(c.name, " ", "-")
		put(token, 1, false)
		d, err := b.lanes.Data(ctx, token)
		if err != nil || d.Seen == 0 || len(d.Keys) != 1 {
			t.Fatalf("%s: Data %+v, %v", c.name, d, err)
		}
		c.between(token)
		l := take(token)
		if got, err := l.Untouched(ctx, d.Seen); err != nil || got != c.want {
			t.Errorf("%s: Untouched %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	// A read that saw less than the lane holds (a sequence before its
	// last record) is not confirmed: the record comes first.
	put("behind", 1, false)
	e, err := b.lanes.kv.Get(ctx, recordKey("behind", 1))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := take("behind").Untouched(ctx, e.Revision()-1); err != nil || got {
		t.Errorf("a read behind the lane's last write: Untouched %v, %v; want false", got, err)
	}
	if got, err := take("unread").Untouched(ctx, 0); err != nil || got {
		t.Errorf("no read: Untouched %v, %v; want false", got, err)
	}
}

// TestForgetAfterAnotherForget: a forget that read the lane (Data) before
// another forget emptied it, and took the lease after that one released
// it, is not told so by Untouched (a purge leaves no marker), but its
// Forget counts what its purges removed: none. The old Forget reported
// the keys its earlier read found, so the lane was counted forgotten
// twice.
func TestForgetAfterAnotherForget(t *testing.T) {
	t.Parallel()
	b := setup(t, leaseOutlivesTest)
	ctx := t.Context()
	owner, err := b.lanes.Acquire(ctx, "gone", LeaseInfo{Worker: "owner"})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if _, err := owner.PutRecord(ctx, turn(seq, "hi")); err != nil {
			t.Fatal(err)
		}
	}
	if err := owner.PutSettings(ctx, []byte("s")); err != nil {
		t.Fatal(err)
	}
	if err := owner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := b.lanes.Data(ctx, "gone") // the pass's read
	if err != nil || len(d.Keys) != 4 {
		t.Fatalf("Data %+v, %v", d, err)
	}
	// An operator's forget of the lane, start to end, in between.
	op, err := b.lanes.Acquire(ctx, "gone", LeaseInfo{Worker: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	od, err := b.lanes.Data(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := op.Forget(ctx, od.Keys); err != nil || n != 4 {
		t.Fatalf("the operator's forget: %d, %v; want 4 keys", n, err)
	}
	if err := op.Release(ctx); err != nil {
		t.Fatal(err)
	}
	pass, err := b.lanes.Acquire(ctx, "gone", LeaseInfo{Worker: "pass"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pass.Release(context.WithoutCancel(ctx)) }()
	if same, err := pass.Untouched(ctx, d.Seen); err != nil || !same {
		t.Logf("Untouched %v, %v: it saw the other forget after all", same, err)
	}
	if n, err := pass.Forget(ctx, d.Keys); err != nil || n != 0 {
		t.Fatalf("the pass's forget after it: %d, %v; want 0 keys", n, err)
	}
}

// TestScanBatchShort: a message the scan's consumer counted that is gone
// before the fetch (a purge, a key written again) leaves a short batch of
// the others, in order; a scan whose every counted message went is none.
// (BenchmarkScanBatchShort times it: the old fetch waited scanWait for
// the message that was gone.)
func TestScanBatchShort(t *testing.T) {
	t.Parallel()
	b := setup(t, leaseOutlivesTest)
	ctx := t.Context()
	var seqs []uint64
	for i := range 5 {
		rev, err := b.lanes.kv.Put(ctx, "lane.tx."+strconv.Itoa(i+1), []byte("r"))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, rev)
	}
	b.lanes.testHookScan = func() {
		if err := b.lanes.stream.Purge(ctx, jetstream.WithPurgeSubject(b.lanes.prefix+"lane.tx.3")); err != nil {
			t.Error(err)
		}
	}
	sts, err := b.lanes.ScanBatch(ctx, seqs[0], 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, st := range sts {
		got = append(got, st.Seq)
	}
	if want := []uint64{seqs[0], seqs[1], seqs[3], seqs[4]}; !slices.Equal(got, want) {
		t.Fatalf("scan: %v, want %v", got, want)
	}
	b.lanes.testHookScan = func() {
		if err := b.lanes.stream.Purge(ctx); err != nil {
			t.Error(err)
		}
	}
	if sts, err := b.lanes.ScanBatch(ctx, seqs[0], 10); err != nil || len(sts) != 0 {
		t.Fatalf("scan of what went: %+v, %v", sts, err)
	}
}

// BenchmarkScanBatchShort: a scan of 100 messages the newest of which is
// removed between the consumer's count and its fetch.
func BenchmarkScanBatchShort(b *testing.B) {
	srv := natstest.Start(b)
	js := natstest.JetStream(b, srv.URL)
	ctx := b.Context()
	lanes, err := Open(ctx, js, Config{LeaseTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	put := func() uint64 {
		n++
		rev, err := lanes.kv.Put(ctx, "lane.tx."+strconv.Itoa(n), []byte("r"))
		if err != nil {
			b.Fatal(err)
		}
		return rev
	}
	for range 100 {
		put()
	}
	var victim uint64
	lanes.testHookScan = func() {
		if err := lanes.stream.Purge(ctx, jetstream.WithPurgeSubject(lanes.prefix+"lane.tx."+strconv.Itoa(n))); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		victim = put()
		if _, err := lanes.ScanBatch(ctx, victim-99, 100); err != nil {
			b.Fatal(err)
		}
	}
}
