package fleet

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// TestTurnStackWhileModelWaits: a turn waiting on its model holds less
// than 32 KB of goroutine stack, its own goroutine's and the lane's
// (lease heartbeat, cut subscription) together. The turn's goroutine
// waited on the model about 23 KB deep, so its stack was 32 KB alone (a
// stack shrinks at a GC only when under a quarter used); it now waits
// about 10 KB deep, on a 16 KB stack (docs/scaling.md, "What a turn in
// flight holds"). Not parallel: the stacks are the whole process's.
func TestTurnStackWhileModelWaits(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation and doubled stack guard change every frame: the stack is measured without it")
	}
	const turns = 40
	m, c, ctx := runMember(t, Config{DataDir: t.TempDir(), ScriptedDelay: time.Hour, ShutdownGrace: time.Millisecond})
	if _, err := c.Send(ctx, "stack-warm", "warm up"); err != nil {
		t.Fatal(err)
	}
	waitInModel(t, ctx.Err, 1)
	before := goroutineStacks()
	for i := range turns {
		if _, err := c.Send(ctx, fmt.Sprintf("stack-%d", i), "hello there"); err != nil {
			t.Fatal(err)
		}
	}
	waitInModel(t, ctx.Err, turns+1)
	if n := m.Worker.Active(); n != turns+1 {
		t.Fatalf("%d turns in flight; want %d", n, turns+1)
	}
	per := float64(goroutineStacks()-before) / turns / 1024
	t.Logf("%.1f KB of goroutine stack a turn waiting on its model", per)
	if per >= 32 {
		t.Fatalf("a turn waiting on its model holds %.1f KB of goroutine stack; want under 32 (its own goroutine's stack was 32 KB when it waited 23 KB deep)", per)
	}
}

// waitInModel waits until n goroutines wait in the scripted model.
func waitInModel(t *testing.T, done func() error, n int) {
	t.Helper()
	buf := make([]byte, 8<<20)
	for {
		all := buf[:runtime.Stack(buf, true)]
		if bytes.Count(all, []byte("scripted.(*Provider).sleep")) >= n {
			return
		}
		if done() != nil {
			t.Fatalf("fewer than %d turns reached the model:\n%s", n, all)
		}
		runtime.Gosched()
	}
}

// goroutineStacks is the bytes of goroutine stacks, after GCs that shrink
// the stacks that can be.
func goroutineStacks() uint64 {
	for range 3 {
		runtime.GC()
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
