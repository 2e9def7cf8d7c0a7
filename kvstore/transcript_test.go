package kvstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestReadTranscriptBatched (issue 17 item 1): a long transcript is read in
// a handful of requests, not one per record, and the read is exact: every
// record of the lane in order, none of another lane's, a rewritten record
// once at its new place, a removed one's marker reported, a corrupt one
// skipped with its error, Last the newest message the cursor names; the
// read's consumer is gone afterwards. A read from Last+1 returns only what
// was added since.
func TestReadTranscriptBatched(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{LeaseTTL: 5 * time.Minute}) // no renewals: outlives the writes on a busy box
	ctx, lanes, nc := t.Context(), b.lanes, b.js.Conn()
	mine, err := lanes.Acquire(ctx, "long", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := lanes.Acquire(ctx, "longer", LeaseInfo{Worker: "a"}) // "long.tx.>" must not match it
	if err != nil {
		t.Fatal(err)
	}
	const n = 2 * batchMax
	for i := uint64(1); i <= n; i++ {
		if _, err := mine.PutRecord(ctx, turn(i, strconv.FormatUint(i, 10))); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := other.PutRecord(ctx, turn(i, "other")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Record 7 is written again (a re-run whose first write was stored),
	// record 9 deleted, record 10 replaced by garbage.
	if _, err := mine.PutRecord(ctx, turn(7, "7 again")); err != nil {
		t.Fatal(err)
	}
	if err := lanes.kv.Delete(ctx, "long.tx.9"); err != nil {
		t.Fatal(err)
	}
	if _, err := lanes.kv.Put(ctx, "long.tx.10", []byte("not msgpack")); err != nil {
		t.Fatal(err)
	}
	last, err := mine.PutRecord(ctx, turn(n+1, "newest"))
	if err != nil {
		t.Fatal(err)
	}

	before := nc.Stats().OutMsgs
	tr, err := lanes.ReadTranscript(ctx, "long", 1)
	requests := nc.Stats().OutMsgs - before
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Key != "long.tx.10" {
		t.Fatalf("err = %v, want the corrupt record 10", err)
	}
	if requests > 12 {
		t.Errorf("the read of %d records took %d API requests, want a handful", n, requests)
	}
	want := []uint64{}
	for i := uint64(1); i <= n+1; i++ {
		if i != 7 && i != 9 && i != 10 {
			want = append(want, i)
		}
	}
	want = append(want[:len(want)-1], 7, n+1) // 7 was written again just before the newest
	if len(tr.Records) != len(want) {
		t.Fatalf("%d records, want %d", len(tr.Records), len(want))
	}
	for i, r := range tr.Records {
		if r.InboundSeq != want[i] {
			t.Fatalf("record %d is inbound %d, want %d", i, r.InboundSeq, want[i])
		}
	}
	if got := tr.Records[len(tr.Records)-2].Entries[0].Message.Content.Text(); got != "7 again" {
		t.Errorf("rewritten record 7 reads %q", got)
	}
	if !tr.Removed {
		t.Error("the delete marker of record 9 is not reported")
	}
	c, err := lanes.Cursor(ctx, "long")
	if err != nil || tr.Last != c.Stored || tr.Last != last.Seq || c.Seq != n+1 {
		t.Fatalf("Last %d, cursor %+v (%v), the newest write at %d: want all the same", tr.Last, c, err, last.Seq)
	}
	if tr.First == 0 || tr.First > tr.Last || tr.Size < len(tr.Records)*10 {
		t.Errorf("First %d, Size %d", tr.First, tr.Size)
	}
	info, err := lanes.Stream().Info(ctx)
	if err != nil || info.State.Consumers != 0 {
		t.Errorf("consumers left on the bucket's stream: %+v, %v", info.State.Consumers, err)
	}

	// The tail: only what was added after Last.
	for i := uint64(n + 2); i <= n+4; i++ {
		if _, err := mine.PutRecord(ctx, turn(i, "tail")); err != nil {
			t.Fatal(err)
		}
	}
	tail, err := lanes.ReadTranscript(ctx, "long", tr.Last+1)
	if err != nil || len(tail.Records) != 3 || tail.Records[0].InboundSeq != n+2 || tail.Removed || tail.First <= tr.Last {
		t.Fatalf("tail = %+v, %v; want records %d..%d", tail, err, n+2, n+4)
	}
	if first, err := lanes.FirstStored(ctx, "long"); err != nil || first != tr.First {
		t.Errorf("FirstStored = %d, %v; want %d", first, err, tr.First)
	}
	if first, err := lanes.FirstStored(ctx, "nobody"); err != nil || first != 0 {
		t.Errorf("FirstStored of an empty lane = %d, %v", first, err)
	}
}

// TestReadTranscriptReplicated: on a bucket replicated three ways, a read
// through a connection to a node that leads nothing still gets every
// record in batches, and leaves no consumer.
func TestReadTranscriptReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	t.Parallel()
	cl := natstest.StartCluster(t, 3)
	var lanes []*Lanes
	var conns []*nats.Conn
	for _, url := range cl.URLs {
		js := natstest.JetStream(t, url, jetstream.WithDefaultTimeout(30*time.Second))
		nc := js.Conn()
		l := openReplicated(t, js, Config{Replicas: 3, LeaseTTL: 30 * time.Second})
		lanes, conns = append(lanes, l), append(conns, nc)
	}
	ctx := t.Context()
	lease, err := lanes[0].Acquire(ctx, "r3", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := uint64(1); i <= n; i++ {
		if _, err := lease.PutRecord(ctx, turn(i, strconv.FormatUint(i, 10))); err != nil {
			t.Fatal(err)
		}
	}
	// Every replica has the records: a batch's consumer, which may sit on
	// any of them, reads them all (one on a lagging replica ends early and
	// leaves the rest to single reads, which the count below would take
	// for a read without batches).
	// A consumer the meta layer could not create in time (it may still be
	// settling on a busy box) also leaves the read to single reads: every
	// read must be whole, and one of three on each node batched.
	natstest.WaitCurrent(t, lanes[0].Stream())
	for i, l := range lanes {
		var counts []uint64
		for try := 0; try < 3; try++ {
			before := conns[i].Stats().OutMsgs
			tr, err := l.ReadTranscript(ctx, "r3", 1)
			if err != nil || len(tr.Records) != n || tr.Records[n-1].InboundSeq != n {
				t.Fatalf("node %d: %d records, %v", i+1, len(tr.Records), err)
			}
			counts = append(counts, conns[i].Stats().OutMsgs-before)
			if counts[try] <= 12 {
				break
			}
		}
		if last := counts[len(counts)-1]; last > 12 {
			t.Errorf("node %d: %v requests for %d records in three reads", i+1, counts, n)
		}
	}
	// Through every node, the retention pass's scan finds every record,
	// in order, and a read of the newest turns the newest five.
	for i, l := range lanes {
		var data int
		var last uint64
		for seq := uint64(1); ; {
			sts, err := l.ScanBatch(ctx, seq, 16)
			if err != nil {
				t.Fatalf("node %d: scan from %d: %v", i+1, seq, err)
			}
			if len(sts) == 0 {
				break
			}
			for _, st := range sts {
				if st.Seq <= last {
					t.Fatalf("node %d: scan went back to %d after %d", i+1, st.Seq, last)
				}
				last, seq = st.Seq, st.Seq+1
				if st.Data {
					data++
				}
			}
		}
		if data != n {
			t.Errorf("node %d: the scan found %d records, want %d", i+1, data, n)
		}
		var newest []uint64
		if _, err := l.NewestRecords(ctx, "r3", 0, NewestLimits{Records: 5, Bytes: 1 << 20}, func(r Record) bool {
			newest = append(newest, r.InboundSeq)
			return true
		}); err != nil || !slices.Equal(newest, []uint64{n, n - 1, n - 2, n - 3, n - 4}) {
			t.Errorf("node %d: newest %v, %v", i+1, newest, err)
		}
	}
	// The batch and scan consumers are deleted; in a cluster the stream's
	// count learns it through the meta layer, a moment later.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		info, err := lanes[0].Stream().Info(ctx)
		if err == nil && info.State.Consumers == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("consumers left: %+v, %v", info, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestTranscriptBuilderNewestWins: a read that meets a key twice (a batch
// consumer on a lagging replica handed over an older copy of a record the
// leader has since rewritten or deleted) keeps only the key's newest
// message, at its place, and says records were removed.
func TestTranscriptBuilderNewestWins(t *testing.T) {
	t.Parallel()
	enc := func(seq uint64, text string) []byte {
		r := turn(seq, text)
		data, err := msgpack.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	const p = "$KV.lanes."
	cases := []struct {
		name string
		msgs []struct {
			subj string
			data []byte
		}
		want    []string
		removed bool
		first   uint64 // stream sequence of the first record kept
	}{
		{"plain", []struct {
			subj string
			data []byte
		}{{p + "a.tx.1", enc(1, "one")}, {p + "a.tx.2", enc(2, "two")}}, []string{"one", "two"}, false, 1},
		{"rewritten", []struct {
			subj string
			data []byte
		}{{p + "a.tx.1", enc(1, "one")}, {p + "a.tx.2", enc(2, "old")}, {p + "a.tx.3", enc(3, "three")}, {p + "a.tx.2", enc(2, "new")}},
			[]string{"one", "three", "new"}, true, 1},
		{"deleted", []struct {
			subj string
			data []byte
		}{{p + "a.tx.1", enc(1, "one")}, {p + "a.tx.2", enc(2, "two")}, {p + "a.tx.1", nil}}, []string{"two"}, true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := &transcriptBuilder{prefix: p, at: map[string]int{}}
			size := 0
			for i, m := range tc.msgs {
				b.add(uint64(i+1), m.subj, nats.Header{}, m.data)
			}
			var got []string
			for _, e := range Entries(b.t.Records) {
				got = append(got, e.Message.Content.Text())
			}
			for _, r := range b.t.Records {
				data, _ := msgpack.Marshal(&r)
				size += len(data)
			}
			if !slices.Equal(got, tc.want) || b.t.Removed != tc.removed || b.t.Size != size || len(b.corrupt) != 0 || b.t.First != tc.first {
				t.Fatalf("records %q removed %v size %d (of kept %d) first %d corrupt %v; want %q removed %v first %d", got, b.t.Removed, b.t.Size, size, b.t.First, b.corrupt, tc.want, tc.removed, tc.first)
			}
		})
	}
}
