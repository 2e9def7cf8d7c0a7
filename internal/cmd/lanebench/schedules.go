package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
)

// Flags of -scenario schedules (issue 33: "10,000 schedules on one fleet
// cost no worker CPU between firings").
var (
	schedN    = flag.Int("schedules", 10000, "schedules: schedules to add, each @every 1h (no firing during the run)")
	schedIdle = flag.Duration("schedules-idle", 20*time.Second, "schedules: how long the idle worker is measured, before and after adding them")
	schedProf = flag.String("schedules-cpuprofile", "", "schedules: write a CPU profile of each idle window to <this>.before.pb.gz and <this>.after.pb.gz")
)

// schedBench measures what schedules cost a worker between their
// firings: one worker with its embedded server (one process), idle for
// -schedules-idle holding no schedule, then holding -schedules of them
// whose next firings are an hour away; its CPU time and RSS over each
// window, side by side. The fleet keeps one pending server-scheduled
// message per schedule and no loop of its own per schedule: the CPU per
// second should not move.
func schedBench(o options) error {
	if *schedN < 1 || *schedIdle <= 0 {
		return errors.New("schedules: -schedules and -schedules-idle must be positive")
	}
	dir, err := os.MkdirTemp("", "lanebench-sched")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bm, err := startMember(ctx, fleet.Config{DataDir: dir, WorkspaceRoot: filepath.Join(dir, "workspaces"), Listen: "127.0.0.1:0",
		SyncAlways: o.sync, WorkerID: "sched", Scripted: true, Logger: zerolog.Nop()})
	if err != nil {
		return err
	}
	defer bm.stop()
	c := bm.c
	fmt.Printf("lanebench schedules: one worker with its embedded server (one process), sync_interval %s, idle %v before and after adding %d schedules (@every 1h), GOMAXPROCS %d\n\n",
		map[bool]string{true: "always", false: "default (2m)"}[o.sync], *schedIdle, *schedN, runtime.GOMAXPROCS(0))
	idle := func(name string) (cpuPerS float64, rssMB float64, err error) {
		// Memory freed by the adding goes back to the OS now, not by the
		// runtime's scavenger during the window (its madvise calls were
		// 65% of a window's CPU in a first run, none of it the schedules').
		debug.FreeOSMemory()
		cpu0, t0 := cpuTime(), time.Now()
		if *schedProf == "" {
			time.Sleep(*schedIdle)
		} else if err := cpuProfile(*schedProf+"."+name+".pb.gz", func() { time.Sleep(*schedIdle) }); err != nil {
			return 0, 0, err
		}
		cpu, el := cpuTime()-cpu0, time.Since(t0)
		return float64(cpu.Microseconds()) / 1000 / el.Seconds(), mb(rss()), nil
	}
	// The worker makes its schedules bucket at start: wait for it.
	for deadline := time.Now().Add(time.Minute); ; {
		if _, _, err := c.Schedules(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("schedules: the worker's schedules never came up: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	before, rss0, err := idle("before")
	if err != nil {
		return err
	}

	t0 := time.Now()
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		errMu  sync.Mutex
		failed error
	)
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(*schedN) {
					return
				}
				_, err := c.AddSchedule(ctx, lanefleet.NewSchedule{Session: "sched-" + strconv.FormatInt(i, 10), Every: time.Hour,
					Message: events.Inbound{Text: "hourly"}})
				if err != nil {
					errMu.Lock()
					failed = errors.Join(failed, fmt.Errorf("schedule %d: %w", i, err))
					errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if failed != nil {
		return failed
	}
	added := time.Since(t0)
	after, rss1, err := idle("after")
	if err != nil {
		return err
	}
	fmt.Printf("  %-28s %12s %8s\n", "", "CPU ms/s", "RSS MB")
	fmt.Printf("  %-28s %12.2f %8.0f\n", "idle, no schedules", before, rss0)
	fmt.Printf("  %-28s %12.2f %8.0f\n", fmt.Sprintf("idle, %d schedules", *schedN), after, rss1)
	fmt.Printf("\n  CPU per second with the schedules ÷ without: %.2f× (%+.2f ms/s, %+.3f µs/s per schedule)\n",
		after/max(before, 0.001), after-before, (after-before)*1000/float64(*schedN))
	fmt.Printf("  adding them: %v (%.0f schedules/s, 16 at a time); RSS %+.0f MB (%.1f KB per schedule)\n",
		added.Round(time.Millisecond), float64(*schedN)/added.Seconds(), rss1-rss0, (rss1-rss0)*1024/float64(*schedN))
	return nil
}

// cpuProfile runs fn with the CPU profiler writing to path.
func cpuProfile(path string, fn func()) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	fn()
	pprof.StopCPUProfile()
	return f.Close()
}
