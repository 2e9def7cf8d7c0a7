package lanes

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/retention"
)

// BenchmarkExpireIdle forgets sessions as the soak leaves them (64 at a
// time writing 50 turns each, their records interleaved in the lanes
// bucket's blocks; ~1.5 KB a record) once the server's block caches have
// expired (the pass forgets sessions a TTL old), while a busy lane puts one
// record after another, as a worker's turns do. It reports the process's
// CPU per forgotten session (the server is in this process; less what the
// busy lane spent per second before the pass), the pass's
// sessions/s, and the busy lane's put latency during the pass against the
// same lane's before it: the cost the fleet's turns see. Run it with
// -benchtime 1x: one iteration writes ~50 MB and waits out the server's
// block cache expiry (10 s), which is what makes the purges' reads cold.
func BenchmarkExpireIdle(b *testing.B) {
	for _, busy := range []bool{false, true} {
		b.Run(map[bool]string{false: "alone", true: "beside-writes"}[busy], func(b *testing.B) {
			for range b.N {
				benchExpireOnce(b, busy)
			}
		})
	}
}

func benchExpireOnce(b *testing.B, writes bool) {
	b.StopTimer()
	defer b.StartTimer()
	ctx := b.Context()
	srv := natstest.Start(b)
	nc := natstest.Connect(b, srv.URL)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	streams, err := EnsureStreams(ctx, js, StreamConfig{})
	if err != nil {
		b.Fatal(err)
	}
	lanes, err := kvstore.Open(ctx, js, kvstore.Config{LeaseTTL: 30 * time.Second, MarkerTTL: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWorker(js, streams, lanes, &echoHandler{}, Config{SweepEvery: -1, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	const (
		loops    = 64
		sessions = 640
		turns    = 50
	)
	text := strings.Repeat("a soak turn's words ", 75)
	record := func(seq uint64) kvstore.Record {
		u := message.User(text, 1)
		return kvstore.Record{InboundSeq: seq, RunID: "r" + strconv.FormatUint(seq, 10),
			Entries: []message.Entry{{Type: message.EntryMessage, ID: "e" + strconv.FormatUint(seq, 10), Message: &u}}}
	}
	var wg sync.WaitGroup
	for l := range loops {
		wg.Go(func() {
			for s := l; s < sessions; s += loops {
				lease, err := lanes.Acquire(ctx, "s"+strconv.Itoa(s), kvstore.LeaseInfo{Worker: "bench"})
				if err != nil {
					b.Error(err)
					return
				}
				for seq := uint64(1); seq <= turns; seq++ {
					if _, err := lease.PutRecord(ctx, record(seq)); err != nil {
						b.Error(err)
						return
					}
				}
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	cutoff := time.Now()
	// The pass forgets sessions a TTL old, whose blocks the server no
	// longer caches (defaultCacheBufferExpiration, 10 s).
	time.Sleep(11 * time.Second)

	// The busy lane: one put after another, its latencies in windows.
	busy, err := lanes.Acquire(ctx, "busy", kvstore.LeaseInfo{Worker: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu      sync.Mutex
		lat     []time.Duration
		stopped = make(chan struct{})
	)
	bctx, stop := context.WithCancel(ctx)
	go func() {
		defer close(stopped)
		renewed := time.Now()
		for seq := uint64(1); writes && bctx.Err() == nil; seq++ {
			if time.Since(renewed) > 5*time.Second {
				if err := busy.Renew(bctx); err != nil {
					return
				}
				renewed = time.Now()
			}
			t0 := time.Now()
			if _, err := busy.PutRecord(bctx, record(seq)); err != nil {
				return
			}
			mu.Lock()
			lat = append(lat, time.Since(t0))
			mu.Unlock()
		}
	}()
	window := func(d time.Duration) []time.Duration {
		mu.Lock()
		lat = lat[:0]
		mu.Unlock()
		time.Sleep(d)
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lat)
	}
	cb := benchCPU()
	base := window(2 * time.Second)
	idleCPU := (benchCPU() - cb) / 2 // per second, the busy lane's
	mu.Lock()
	lat = lat[:0]
	mu.Unlock()
	c0, t0 := benchCPU(), time.Now()
	b.StartTimer()
	// As the worker's loop runs it: a pass every retention.PassEvery, each
	// within that time and its budget.
	var st ExpireStats
	err = nil
	tick := time.NewTicker(retention.PassEvery)
	for st.Expired < sessions && err == nil {
		<-tick.C
		pctx, cancel := context.WithTimeout(ctx, retention.PassEvery)
		var one ExpireStats
		one, err = w.ExpireIdle(pctx, cutoff, retention.Policy{}.Budget())
		cancel()
		st.Expired += one.Expired
	}
	tick.Stop()
	b.StopTimer()
	took, cpu := time.Since(t0), benchCPU()-c0
	mu.Lock()
	during := slices.Clone(lat)
	mu.Unlock()
	stop()
	<-stopped
	if err != nil {
		b.Fatal(err)
	}
	if st.Expired != sessions {
		b.Fatalf("pass: %+v, want %d sessions forgotten", st, sessions)
	}
	cpu -= time.Duration(float64(idleCPU) * took.Seconds())
	b.ReportMetric(float64(cpu.Microseconds())/sessions, "cpu-µs/session")
	b.ReportMetric(sessions/took.Seconds(), "sessions/s")
	if !writes {
		return
	}
	b.ReportMetric(pct(base, 99), "put-p99-before-ms")
	b.ReportMetric(pct(during, 99), "put-p99-during-ms")
	b.ReportMetric(pct(during, 100), "put-max-during-ms")
	b.ReportMetric(float64(len(during))/took.Seconds()/(float64(len(base))/2), "puts/s-during÷before")
}

// pct is the p-th percentile of ds in ms.
func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	i := min(len(ds)-1, len(ds)*p/100)
	return float64(ds[i].Microseconds()) / 1000
}

// benchCPU is the process's CPU time so far (user and system).
func benchCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
