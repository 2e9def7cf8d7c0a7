package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// BenchmarkGovernance measures full turns (Send, then Wait for the final
// event) on the scripted echo model, one worker, 8 sessions of tenant acme
// sending at once: off (--no-budgets), on with no budget set (the hot path
// must cost about nothing: a call's admission is one atomic load), and on
// with a budget on the tenant (each model call reserves and settles by
// lease on the budget: a chunk taken by compare-and-set in the budgets
// bucket, the calls admitted and settled against it in memory). The three
// alternate for benchRounds rounds, so a machine's load falls on all of
// them alike; the figures to read are turns/s, as ratios to off's in the
// same round, and CPU per turn, which other load on the machine disturbs
// far less.
func BenchmarkGovernance(b *testing.B) {
	const benchRounds = 3
	cases := []struct {
		name   string
		off    bool
		budget bool
	}{{"off", true, false}, {"on-no-budget", false, false}, {"on-tenant-budget", false, true}}
	for i := range benchRounds * len(cases) {
		c := cases[i%len(cases)]
		b.Run(c.name, func(b *testing.B) {
			srv := natstest.Start(b)
			m, err := fleet.Start(b.Context(), fleet.Config{NATSURL: srv.URL, WorkerID: "bench", Scripted: true, DefaultModel: "scripted/echo",
				NoBuiltinTools: true, NoBudgets: c.off, Logger: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = m.Run(ctx) }()
			defer func() { cancel(); <-done }()
			cl, _ := lanefleet.New(natstest.Connect(b, srv.URL))
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
			defer wcancel()
			if c.budget {
				acme := lanefleet.TenantBudget("acme")
				if _, _, err := cl.SetBudget(wctx, acme, governance.Limits{Max: governance.Amount{Tokens: 1 << 40, Turns: 1 << 40}}, "bench"); err != nil {
					b.Fatal(err)
				}
				for !m.Budgeted(acme) {
					time.Sleep(time.Millisecond)
				}
			}
			var session atomic.Int64
			start, cpu0 := time.Now(), processCPU()
			b.SetParallelism(4) // 4 senders per GOMAXPROCS: 8 sessions on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				s := fmt.Sprintf("acme:s%d", session.Add(1))
				for pb.Next() {
					r, err := cl.Send(wctx, s, "hello")
					if err != nil {
						b.Error(err)
						return
					}
					if res, err := r.Wait(wctx); err != nil || res.Payloads[0].Text != "echo: hello" {
						b.Errorf("turn: %+v, %v", res, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
			// CPU per turn (the fleet runs in this process) is the figure a
			// loaded machine disturbs least.
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/turn")
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
