package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/schedstore"
)

// TestChaosSoak is the long fault soak behind `make chaos`: a 3-node cluster
// of nats-server processes (R3), three worker processes, hundreds of
// sessions sending all the time, and a random fault every few seconds
// (SIGKILL, SIGSTOP past AckWait, SIGTERM restart of a worker; SIGKILL of a
// stream leader or any node). When the time is up the faults stop, every
// run must end, and the audit counts lost and duplicated finals, events of
// older attempts stored after a newer one's, healthy messages dead-lettered
// (every message is healthy: any poison final or dead letter is one) and
// transcript defects, and audits an @every 2s schedule that fires through
// it all (fault_sched_test.go), and prints them on one line ("chaos
// summary") after one saying how long the audit took. The run audit reads
// the event stream in order, once to wait for the finals and once to
// count (fault_audit_test.go). It
// runs only with LANEFLEET_CHAOS set to a duration
// (LANEFLEET_CHAOS_SESSIONS: sessions, default 200).
func TestChaosSoak(t *testing.T) {
	dur, err := time.ParseDuration(os.Getenv("LANEFLEET_CHAOS"))
	if err != nil || dur <= 0 {
		t.Skip("set LANEFLEET_CHAOS to a duration (make chaos)")
	}
	sessions := 200
	if n, err := strconv.Atoi(os.Getenv("LANEFLEET_CHAOS_SESSIONS")); err == nil && n > 0 {
		sessions = n
	}
	cl := natstest.StartProcCluster(t, 3)
	var workers []*procWorker
	for i := range 3 {
		workers = append(workers, startWorkerProc(t, cl.URL(), fmt.Sprintf("chaos%d", i),
			"--replicas", "3", "--scripted-delay", "10ms", "--concurrency", "64"))
	}
	nc, js := connectProcs(t, cl)
	waitForFleet(t, js)
	fin := watchRunFinals(t, cl.URL())
	seen := watchStale(t, cl.URL())
	c, err := lanefleet.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sched := startChaosSchedule(t, c, js)

	ctx, stop := context.WithTimeout(t.Context(), dur)
	defer stop()
	// A full lane makes its sender wait (backpressure), but not for more
	// than a few minutes past the soak: a lane stuck that long is a defect.
	sendCtx, stopSending := context.WithTimeout(t.Context(), dur+5*time.Minute)
	defer stopSending()
	var (
		mu   sync.Mutex
		runs []runRef
		want = map[string][]string{}
		wg   sync.WaitGroup
	)
	for s := range sessions {
		key := fmt.Sprintf("chaos:%d", s)
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				text := fmt.Sprintf("message %d of session %d in a few more words", i, s)
				r, err := publishRetried(sendCtx, js, outMsg{key, text, fmt.Sprintf("chaos-%d-%d", s, i)})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				runs = append(runs, r)
				want[key] = append(want[key], text)
				mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(200*time.Millisecond + rand.N(3*time.Second)):
				}
			}
		})
	}

	faults := map[string]int{}
	var windows []faultWindow
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(3*time.Second + rand.N(5*time.Second)):
		}
		if ctx.Err() != nil {
			break
		}
		w := workers[rand.N(len(workers))]
		struck := time.Now()
		switch f := rand.N(5); f {
		case 0:
			noteFault(t, faults, "worker SIGKILL "+w.id)
			w.kill()
			time.Sleep(rand.N(3 * time.Second))
			w.start()
		case 1:
			noteFault(t, faults, "worker SIGSTOP past AckWait "+w.id)
			w.signal(syscall.SIGSTOP)
			time.Sleep(2*time.Second + rand.N(3*time.Second))
			w.signal(syscall.SIGCONT)
		case 2:
			noteFault(t, faults, "worker SIGTERM restart "+w.id)
			w.signal(syscall.SIGTERM)
			w.wait()
			w.start()
		case 3, 4:
			stream := events.EventStream
			if f == 4 {
				stream = []string{events.InboundStream, events.EventStream, "KV_lanes", schedstore.Stream, "KV_" + schedstore.DefaultBucket}[rand.N(5)]
			}
			nd, err := cl.StreamLeader(t.Context(), js, stream)
			if err != nil {
				nd = cl.Nodes[rand.N(len(cl.Nodes))]
			}
			noteFault(t, faults, "nats-server SIGKILL ("+stream+" leader) "+nd.Name)
			nd.Kill()
			time.Sleep(2*time.Second + rand.N(3*time.Second))
			nd.Start()
			cl.WaitReady(t)
		}
		windows = append(windows, faultWindow{struck, time.Now()})
	}
	wg.Wait()
	t.Logf("faults: %v", faults)
	mu.Lock()
	defer mu.Unlock()
	schedRuns, schedCounts := sched.finish(t, js, windows)
	runs = append(runs, schedRuns...)
	t.Logf("%d runs sent; waiting for every final event", len(runs))
	began := time.Now()
	fin.waitAll(t, js, runs, 10*time.Minute)
	stored := time.Now()
	counts := auditAll(t, js, runs)
	audited := time.Now()
	most, total := seen.worst()
	t.Logf("a core subscriber saw %d refused events of older attempts (at most %d in one run)", total, most)
	defects := transcriptDefects(t, c, want)
	t.Logf("audit took %v: finals stored %v, events audited %v, transcripts read %v",
		time.Since(began).Round(time.Millisecond), stored.Sub(began).Round(time.Millisecond),
		audited.Sub(stored).Round(time.Millisecond), time.Since(audited).Round(time.Millisecond))
	t.Logf("chaos summary: %v soak, %d sessions, %d faults %v; %v; transcript defects %d of %d sessions; %v",
		dur, sessions, sumFaults(faults), faults, counts, len(defects), len(want), schedCounts)
	if counts.bad() || len(defects) > 0 || schedCounts.bad() {
		for _, d := range defects[:min(len(defects), 5)] {
			t.Error(d)
		}
		for _, p := range schedCounts.problems[:min(len(schedCounts.problems), 5)] {
			t.Error("schedule: " + p)
		}
		t.Fatalf("the soak found defects: %s", strings.Join(counts.examples, "; "))
	}
}

// noteFault counts a fault of a kind ("worker SIGKILL chaos1": the kind,
// then which process) and logs when it struck, to line up with the
// processes' logs.
func noteFault(t *testing.T, faults map[string]int, what string) {
	t.Logf("%s fault: %s", time.Now().Format("15:04:05.000"), what)
	kind := what[:strings.LastIndexByte(what, ' ')]
	faults[kind]++
}

// sumFaults counts the faults of every kind.
func sumFaults(faults map[string]int) int {
	n := 0
	for _, c := range faults {
		n += c
	}
	return n
}
