package lanes

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestSetupGateBounds: the gate lets n set-ups through at once; the next
// waits until one leaves; leaving twice gives back one place; a set-up
// that stalls gives its place back after the keep; no gate never waits.
func TestSetupGateBounds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testSetupGateBounds)
}

func testSetupGateBounds(t *testing.T) {
	g := newSetupGate(2, time.Hour)
	l1, _ := g.enter(nil)
	l2, _ := g.enter(nil)
	entered := make(chan func())
	go func() {
		leave, _ := g.enter(nil)
		entered <- leave
	}()
	synctest.Wait() // the third set-up waits at the gate
	select {
	case <-entered:
		t.Fatal("a third set-up got through a gate of two")
	default:
	}
	l1()
	l1() // harmless
	l3 := <-entered
	if got := len(g.ch); got != 2 {
		t.Fatalf("%d places taken after one left and one entered; want 2", got)
	}
	l2()
	l3()
	if got := len(g.ch); got != 0 {
		t.Fatalf("%d places taken after all left", got)
	}

	stalled := newSetupGate(1, time.Hour)
	stalled.enter(nil) // never left: the keep gives the place back
	got := make(chan func())
	start := time.Now()
	go func() {
		leave, _ := stalled.enter(nil)
		got <- leave
	}()
	(<-got)()
	if waited := time.Since(start); waited != time.Hour {
		t.Fatalf("a stalled set-up's place came back after %v, want the keep (1h)", waited)
	}

	stop := make(chan struct{})
	full := newSetupGate(1, time.Hour)
	full.enter(nil)
	gaveUp := make(chan bool)
	go func() {
		_, ok := full.enter(stop)
		gaveUp <- !ok
	}()
	close(stop)
	if !<-gaveUp {
		t.Fatal("a set-up waiting at the gate got through after the stop instead of giving up")
	}

	none := newSetupGate(-1, 0)
	for range 3 {
		leave, ok := none.enter(nil)
		if !ok {
			t.Fatal("no gate refused a set-up")
		}
		leave()
	}
}

// TestSetupGateBoundsSetUpsNotTurns: with a gate of one, two lanes' turns
// still run at the same time (the place is given back when a turn reaches
// the handler).
func TestSetupGateBoundsSetUpsNotTurns(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Minute, 5*time.Second)
	var (
		mu    sync.Mutex
		in    = map[string]bool{}
		alone []string
	)
	both := make(chan struct{})
	closeBoth := sync.OnceFunc(func() { close(both) })
	h := &echoHandler{hook: func(t *Turn) error {
		mu.Lock()
		in[t.SessionKey] = true
		if len(in) == 2 {
			closeBoth()
		}
		mu.Unlock()
		select {
		case <-both:
		case <-time.After(20 * time.Second):
			mu.Lock()
			alone = append(alone, t.SessionKey)
			mu.Unlock()
		}
		return nil
	}}
	f.fairWorker(t, h, Config{Concurrency: 4, SetupConcurrency: 1, setupKeep: time.Hour})
	a, b := f.publish(t, "gate-a", "a"), f.publish(t, "gate-b", "b")
	f.waitFinal(t, "gate-a", a)
	f.waitFinal(t, "gate-b", b)
	mu.Lock()
	defer mu.Unlock()
	if len(alone) > 0 {
		t.Fatalf("turns of %v ran alone: the gate kept a place while a turn ran", alone)
	}
}
