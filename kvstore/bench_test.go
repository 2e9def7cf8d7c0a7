package kvstore

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// BenchmarkTranscriptRead reads a 1,000-turn transcript as a worker that
// does not have it does (ReadTranscript: batched), next to the baseline of
// one leader read per record (NextRecord, as the lane service pages) on
// the same server and transcript.
func BenchmarkTranscriptRead(b *testing.B) {
	srv := natstest.Start(b)
	js := natstest.JetStream(b, srv.URL)
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

// BenchmarkForget forgets a 50-turn session (records and settings, as the
// retention pass does under the lane's lease) and reports the process's
// CPU per forgotten session: this process holds the server too, so what
// the server spends removing it counts.
func BenchmarkForget(b *testing.B) {
	srv := natstest.Start(b)
	js := natstest.JetStream(b, srv.URL)
	ctx := b.Context()
	lanes, err := Open(ctx, js, Config{LeaseTTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	const turns = 50
	var cpu time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		token := "s" + strconv.Itoa(i)
		i++
		lease, err := lanes.Acquire(ctx, token, LeaseInfo{Worker: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		for seq := uint64(1); seq <= turns; seq++ {
			if _, err := lease.PutRecord(ctx, turn(seq, "turn")); err != nil {
				b.Fatal(err)
			}
		}
		if err := lease.PutSettings(ctx, []byte("s")); err != nil {
			b.Fatal(err)
		}
		d, err := lanes.Data(ctx, token)
		if err != nil || len(d.Keys) != turns+1 {
			b.Fatalf("%d keys, %v", len(d.Keys), err)
		}
		c0 := processCPU()
		b.StartTimer()
		if n, err := lease.Forget(ctx, d.Keys); err != nil || n != turns+1 {
			b.Fatalf("forgot %d keys, %v", n, err)
		}
		b.StopTimer()
		cpu += processCPU() - c0
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/session")
}

// processCPU is the process's CPU time so far (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
