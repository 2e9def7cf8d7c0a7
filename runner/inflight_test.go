package runner

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// heldRuns holds n runs of a new Runner, each a fresh session's first turn, while
// their model waits, and returns the heap bytes a run holds then (live
// objects, after a GC) and the bytes its in-use spans hold beyond them.
// Each run's provider call waits until the runs are measured, then
// answers. With HELD_PROFILE set it writes the heap profile of every
// allocation there while the runs are held.
func heldRuns(t *testing.T, n int, newRunner func(provider.Provider) *Runner) (live, slack float64) {
	t.Helper()
	if os.Getenv("HELD_PROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	var waiting sync.WaitGroup
	waiting.Add(n)
	release := make(chan struct{})
	model := provider.Func(func(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
		waiting.Done()
		select {
		case <-release:
		case <-ctx.Done():
			return message.Message{}, ctx.Err()
		}
		out := message.Message{Role: message.RoleAssistant, Provider: req.Model.Provider, Model: req.Model.ID, API: req.Model.API,
			StopReason: message.StopStop, Content: message.BlocksOf(message.Text("ok"))}
		emit(provider.Event{Type: provider.EventDone, Message: &out})
		return out, nil
	})
	r := newRunner(model)
	// Warm up: what every run shares is loaded before the measure.
	close(release)
	waiting.Add(1)
	if _, err := r.Run(t.Context(), Input{SessionKey: "warm", SessionID: "warm", RunID: "warm", Inbound: &events.Inbound{Text: "hello"}}, nopSink{}); err != nil {
		t.Fatal(err)
	}
	release = make(chan struct{})
	ins := make([]Input, n)
	inbound := make([]events.Inbound, n)
	for i := range ins {
		inbound[i] = events.Inbound{Text: "hello there"}
		ins[i] = Input{SessionKey: fmt.Sprintf("agent:main:held-%04d", i), SessionID: fmt.Sprintf("held-%04d", i), RunID: fmt.Sprintf("run-%04d", i), Inbound: &inbound[i]}
	}
	errs := make(chan error, n)
	before := heapNow()
	for i := range ins {
		go func() {
			_, err := r.Run(t.Context(), ins[i], nopSink{})
			errs <- err
		}()
	}
	// Every run waits on the model, or one ended before it reached it
	// (it would never call Done: the test failed by hanging).
	allWait := make(chan struct{})
	go func() { waiting.Wait(); close(allWait) }()
	select {
	case <-allWait:
	case err := <-errs:
		close(release)
		t.Fatalf("a run ended before its model answered: %v", err)
	}
	held := heapNow()
	if f := os.Getenv("HELD_PROFILE"); f != "" {
		w, _ := os.Create(f)
		_ = pprof.Lookup("heap").WriteTo(w, 0)
		w.Close()
	}
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	live = (float64(held.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
	slack = (float64(held.HeapInuse-held.HeapAlloc) - float64(before.HeapInuse-before.HeapAlloc)) / float64(n)
	return live, slack
}

// heapNow is the heap's statistics after GCs.
func heapNow() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// TestHeapHeldWhileModelWaits: a run waiting on its model holds little
// heap beyond what the turn needs then (docs/scaling.md, "What a turn in
// flight holds"). Not parallel: the heap is the whole process's.
func TestHeapHeldWhileModelWaits(t *testing.T) {
	const runs = 400
	live, slack := heldRuns(t, runs, func(p provider.Provider) *Runner {
		r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
	t.Logf("a run waiting on its model holds %.0f B of live heap (%.0f B of spans' slack beside it)", live, slack)
	// 7,557 bytes on the old code: the run's builder, subscriber and
	// model were objects of their own, its loop and attempt held copies
	// of the model, its loop a map of thinking levels, its tool policies
	// a slice of their own, and a fresh session's context room for four
	// more messages (the test's own goroutine and input included; 6,543
	// bytes now).
	if live > heldRunBytes {
		t.Fatalf("a run waiting on its model holds %.0f bytes of heap; want at most %d", live, heldRunBytes)
	}
}

// heldRunBytes bounds the heap a run holds while its model waits.
const heldRunBytes = 6800
