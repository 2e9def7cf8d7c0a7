package kvstore

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
)

// TestNewestRecords: a long transcript is read newest first and only as
// far as asked: the records handed over and the listing of keys are all
// the bytes that come from the server, not the transcript's megabytes;
// a read goes on from where the last stopped (Next); a deleted record is
// skipped, a corrupt one counted and reported, another lane's never
// read; the read stops at a reset record, which it hands over, and a
// byte limit stops it after the record that crosses it.
func TestNewestRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, leaseOutlivesTest)
	ctx, lanes, nc := t.Context(), b.lanes, b.js.Conn()
	mine, err := lanes.Acquire(ctx, "long", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := lanes.Acquire(ctx, "longer", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 300, 16 << 10
	pad := strings.Repeat("x", size)
	for i := uint64(1); i <= n; i++ {
		if _, err := mine.PutRecord(ctx, padded(i, strconv.FormatUint(i, 10)+" "+pad)); err != nil {
			t.Fatal(err)
		}
		if _, err := other.PutRecord(ctx, padded(n+i, "other "+pad)); err != nil {
			t.Fatal(err)
		}
	}
	if err := lanes.kv.Delete(ctx, "long.tx.299"); err != nil {
		t.Fatal(err)
	}
	if _, err := lanes.kv.Put(ctx, "long.tx.297", []byte("not msgpack")); err != nil {
		t.Fatal(err)
	}
	text := func(r Record) string { return strings.Fields(r.Entries[0].Message.Content.Text())[0] }
	// newest reads below before with lim, up to stop records (0: all),
	// and returns their texts joined.
	newest := func(before uint64, lim NewestLimits, stop int) (string, NewestRead, error) {
		var got []string
		read, err := lanes.NewestRecords(ctx, "long", before, lim, func(r Record) bool {
			got = append(got, text(r))
			return stop == 0 || len(got) < stop
		})
		return strings.Join(got, ","), read, err
	}

	in := nc.Stats().InBytes
	got, read, err := newest(0, NewestLimits{Records: 4, Bytes: 1 << 20}, 0)
	loaded := nc.Stats().InBytes - in
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Key != "long.tx.297" {
		t.Fatalf("err = %v, want the corrupt record 297", err)
	}
	if got != "300,298,296" || read.Records != 4 || !read.More || read.Next != 296 {
		t.Fatalf("read %v %+v; want 300,298,296 (299 deleted, 297 corrupt) and more below 296", got, read)
	}
	// The transcript is 300 × 16 KiB (and its neighbour as much): the
	// read loads its 3 records and the key listing.
	if loaded > 4*size+32<<10 {
		t.Errorf("the read of 4 records loaded %d bytes from the server", loaded)
	}

	// Going on below 296, stopped by the caller after two.
	got, read, err = newest(read.Next, NewestLimits{Records: 100, Bytes: 1 << 20}, 2)
	if err != nil || got != "295,294" || !read.More || read.Next != 294 {
		t.Fatalf("next read %v %+v %v; want 295,294 and more below 294", got, read, err)
	}
	// A byte limit: the record that crosses it is the last.
	got, read, err = newest(10, NewestLimits{Records: 100, Bytes: size * 5 / 4}, 0)
	if err != nil || got != "9,8" || !read.More || read.Next != 8 || read.Bytes <= size {
		t.Fatalf("byte-limited read %v %+v %v; want 9,8 and more below 8", got, read, err)
	}
	// To the lane's first record: nothing more.
	got, read, err = newest(3, NewestLimits{Records: 100, Bytes: 1 << 20}, 0)
	if err != nil || got != "2,1" || read.More {
		t.Fatalf("read to the start %v %+v %v; want 2,1 and no more", got, read, err)
	}

	// A reset: the read hands it over and stops there.
	w, err := mine.PutRecord(ctx, Record{InboundSeq: n + 1, RunID: "r", Reset: true, Entries: turn(n+1, "reset").Entries})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mine.PutRecord(ctx, Record{InboundSeq: n + 2, RunID: "r", Start: w.Seq, Entries: turn(n+2, "after").Entries}); err != nil {
		t.Fatal(err)
	}
	got, read, err = newest(0, NewestLimits{Records: 100, Bytes: 1 << 20}, 0)
	if err != nil || got != "after,reset" || read.More {
		t.Fatalf("read across a reset %v %+v %v; want after,reset and no more", got, read, err)
	}
	// A read that goes on from before the reset finds nothing there.
	got, read, err = newest(10, NewestLimits{Records: 100, Bytes: 1 << 20}, 0)
	if err != nil || got != "" || read.More {
		t.Fatalf("read below the reset %v %+v %v; want nothing", got, read, err)
	}
	if _, err := lanes.NewestRecords(ctx, "none", 0, NewestLimits{Records: 1}, func(Record) bool {
		t.Error("a record of a lane without any")
		return true
	}); err != nil {
		t.Fatal(err)
	}
}

// padded is a turn record whose text is text, under a short entry id.
func padded(seq uint64, text string) Record {
	r := turn(seq, "")
	u := message.User(text, 1)
	r.Entries[0].Message = &u
	return r
}

// TestNewestRecordsEntries: what the read hands over is the record as
// stored.
func TestNewestRecordsEntries(t *testing.T) {
	t.Parallel()
	b := setup(t, leaseOutlivesTest)
	ctx := t.Context()
	lease, err := b.lanes.Acquire(ctx, "e", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	u := message.User("hello", 1)
	if _, err := lease.PutRecord(ctx, Record{InboundSeq: 7, RunID: "run7", SessionID: "s", Entries: []message.Entry{{Type: message.EntryMessage, ID: "x", Message: &u}}}); err != nil {
		t.Fatal(err)
	}
	var got []Record
	if _, err := b.lanes.NewestRecords(ctx, "e", 0, NewestLimits{Records: 1, Bytes: 1}, func(r Record) bool { got = append(got, r); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].RunID != "run7" || got[0].InboundSeq != 7 || got[0].Entries[0].Message.Content.Text() != "hello" {
		t.Fatalf("got %+v", got)
	}
}

// BenchmarkNewestTen reads a session's newest ten turns as sessions_history
// does (NewestRecords), next to the whole read it replaced
// (ReadTranscript), on sessions of 10 and 1,000 turns of about 2 KB each.
func BenchmarkNewestTen(b *testing.B) {
	b.ReportAllocs()
	srv := natstest.Start(b)
	js := natstest.JetStream(b, srv.URL)
	ctx := b.Context()
	lanes, err := Open(ctx, js, Config{LeaseTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("x", 2<<10)
	for _, n := range []uint64{10, 1000} {
		token := "s" + strconv.FormatUint(n, 10)
		lease, err := lanes.Acquire(ctx, token, LeaseInfo{Worker: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		for i := uint64(1); i <= n; i++ {
			if _, err := lease.PutRecord(ctx, padded(i, pad)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(token+"/newest", func(b *testing.B) {
			for b.Loop() {
				got := 0
				if _, err := lanes.NewestRecords(ctx, token, 0, NewestLimits{Records: 10, Bytes: 4 << 20}, func(Record) bool { got++; return true }); err != nil || got != 10 {
					b.Fatalf("%d records, %v", got, err)
				}
			}
		})
		b.Run(token+"/whole", func(b *testing.B) {
			for b.Loop() {
				if t, err := lanes.ReadTranscript(ctx, token, 1); err != nil || uint64(len(t.Records)) != n {
					b.Fatalf("%d records, %v", len(t.Records), err)
				}
			}
		})
	}
}
