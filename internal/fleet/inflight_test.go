package fleet

import (
	"bytes"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/kvstore"
)

// TestInflightTurnHoldsNoRegistryGoroutine: a turn waiting on a slow model,
// listed in the active-run registry, holds no goroutine of the registry's.
// With 1,000 turns in flight each such goroutine was one more stack per
// turn (lanebench -scenario inflight). Before, every turn had one waiting
// from its start to its end.
func TestInflightTurnHoldsNoRegistryGoroutine(t *testing.T) {
	t.Parallel()
	m, c, ctx := runMember(t, Config{DataDir: t.TempDir(), ScriptedDelay: time.Hour, registerAfter: time.Millisecond,
		ShutdownGrace: time.Millisecond})
	kv, err := m.JS.KeyValue(ctx, kvstore.DefaultRunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	run, err := c.Send(ctx, "inflight-registry", "hello there")
	if err != nil {
		t.Fatal(err)
	}
	for e := range w.Updates() { // the turn is listed: its entry is written
		var info kvstore.RunInfo
		if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &info) == nil && info.RunID == run.ID {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the run was never listed")
	}
	// The writer that wrote the entry ends once it has; until ctx's
	// deadline, wait for it to.
	for {
		held := registryGoroutines()
		if held == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a registry goroutine waits with the turn in flight:\n%s", held)
		}
		runtime.Gosched()
	}
	if n := m.Worker.Active(); n != 1 {
		t.Fatalf("%d turns in flight; want the one", n)
	}
}

// registryGoroutines returns the stacks of the goroutines in the
// registry's code, nil when there is none.
func registryGoroutines() []byte {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var held []byte
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("fleet.(*registration)")) || bytes.Contains(g, []byte("fleet.(*Member).register")) {
			held = append(append(held, g...), "\n\n"...)
		}
	}
	return held
}
