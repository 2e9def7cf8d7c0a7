package kvstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// BenchmarkTranscriptRead reads a 1,000-turn transcript as a worker that
// does not have it does (ReadTranscript: batched), next to the baseline of
// one leader read per record (NextRecord, as the lane service pages) on
// the same server and transcript.
func BenchmarkTranscriptRead(b *testing.B) {
	srv := natstest.Start(b)
	js, err := jetstream.New(natstest.Connect(b, srv.URL))
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	lanes, err := Open(ctx, js, Config{LeaseTTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	lease, err := lanes.Acquire(ctx, "long", LeaseInfo{Worker: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	for i := uint64(1); i <= n; i++ {
		if _, err := lease.PutRecord(ctx, turn(i, "turn "+strconv.FormatUint(i, 10))); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("batched", func(b *testing.B) {
		for b.Loop() {
			t, err := lanes.ReadTranscript(ctx, "long", 1)
			if err != nil || len(t.Records) != n {
				b.Fatalf("%d records, %v", len(t.Records), err)
			}
		}
	})
	b.Run("one-request-per-record", func(b *testing.B) {
		for b.Loop() {
			got := 0
			for from := uint64(1); ; got++ {
				_, seq, ok, err := lanes.NextRecord(ctx, "long", from)
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					break
				}
				from = seq + 1
			}
			if got != n {
				b.Fatalf("%d records", got)
			}
		}
	})
}
