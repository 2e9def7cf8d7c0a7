package kvstore

import (
	"errors"
	"testing"
	"time"
)

// TestRunsRegistryHandles: a stale run never clears or updates the entry of
// a newer run of the same session; the newer run clears its own.
func TestRunsRegistryHandles(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Second)
	runs, err := OpenRuns(t.Context(), b.js, RunsConfig{MaxAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if list, err := runs.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("empty registry: %v, %v", list, err)
	}
	old, err := runs.Register(ctx, "lane1", RunInfo{Session: "s1", RunID: "10", Worker: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.SetPhase(ctx, "compacting"); err != nil {
		t.Fatal(err)
	}
	if info, ok, _ := runs.Get(ctx, "lane1"); !ok || info.Phase != "compacting" || info.RunID != "10" {
		t.Fatalf("after SetPhase: %+v %v", info, ok)
	}
	// The lane moved to another worker, which runs the next message.
	newer, err := runs.Register(ctx, "lane1", RunInfo{Session: "s1", RunID: "11", Worker: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.SetPhase(ctx, "running"); !errors.Is(err, ErrStaleRun) {
		t.Fatalf("stale SetPhase: %v", err)
	}
	if err := old.Clear(ctx); !errors.Is(err, ErrStaleRun) {
		t.Fatalf("stale Clear: %v", err)
	}
	if info, ok, _ := runs.Get(ctx, "lane1"); !ok || info.RunID != "11" || info.Worker != "w2" {
		t.Fatalf("the stale run touched the newer entry: %+v %v", info, ok)
	}
	if _, err := runs.Register(ctx, "lane2", RunInfo{Session: "s2", RunID: "12", Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	if list, err := runs.List(ctx); err != nil || len(list) != 2 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := newer.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := runs.Get(ctx, "lane1"); ok {
		t.Fatal("entry still there after its run cleared it")
	}
}
