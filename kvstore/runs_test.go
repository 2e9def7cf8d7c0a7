package kvstore

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/natstest"
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
	if err := old.SetPhase(ctx, RunPhaseCompacting); err != nil {
		t.Fatal(err)
	}
	if info, ok, _ := runs.Get(ctx, "lane1"); !ok || info.Phase != RunPhaseCompacting || info.RunID != "10" {
		t.Fatalf("after SetPhase: %+v %v", info, ok)
	}
	// The lane moved to another worker, which runs the next message.
	newer, err := runs.Register(ctx, "lane1", RunInfo{Session: "s1", RunID: "11", Worker: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.SetPhase(ctx, RunPhaseRunning); !errors.Is(err, ErrStaleRun) {
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

// TestRunsLeaveNothing: a cleared entry leaves no message in the registry
// (no delete marker living the bucket's MaxAge), and the entry of a run
// that is never cleared (its worker died) expires after MaxAge.
func TestRunsLeaveNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Second)
	ctx := t.Context()
	// A registry an older worker made, without markers, is updated.
	if _, err := b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: DefaultRunsBucket, History: 1, TTL: time.Hour,
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	runs, err := OpenRuns(ctx, b.js, RunsConfig{MaxAge: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h, err := runs.Register(ctx, "done", RunInfo{Session: "done", RunID: "1", Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetPhase(ctx, RunPhaseCompacting); err != nil {
		t.Fatal(err)
	}
	if err := h.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	// The purge marker expires; then the bucket holds nothing.
	stream, err := b.js.Stream(ctx, "KV_"+DefaultRunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // detects a hang only
	for {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cleared entry left %d messages in the registry", info.State.Msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := h.Clear(ctx); !errors.Is(err, ErrStaleRun) {
		t.Fatalf("second Clear: %v, want ErrStaleRun", err)
	}
	if _, err := runs.Register(ctx, "dead", RunInfo{Session: "dead", RunID: "2", Worker: "gone"}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok, err := runs.Get(ctx, "dead"); err == nil && !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a dead run's entry outlived the registry's MaxAge")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRunsActive: Active reads many lanes' registry entries as Get reads
// each (a running lane, one whose run cleared its entry, one never
// registered, one whose entry does not read, a token asked twice), in
// one request.
func TestRunsActive(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Second)
	ctx, nc := t.Context(), b.js.Conn()
	runs, err := OpenRuns(ctx, b.js, RunsConfig{MaxAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	fillRuns(t, runs)
	if got, err := runs.Active(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("no tokens: %+v, %v", got, err)
	}
	spy := natstest.Spy(t, nc.ConnectedUrl(), "$JS.API.>")
	tokens := []string{"running", "cleared", "never", "garbled", "running"}
	spy(nc)
	got, err := runs.Active(ctx, tokens)
	if err != nil {
		t.Fatal(err)
	}
	if reqs := spy(nc); len(reqs) != 1 {
		t.Errorf("Active of %d lanes sent %v, want one request", len(tokens), reqs)
	}
	for i, tok := range tokens {
		info, ok, err := runs.Get(ctx, tok)
		if got[i].Info != info || got[i].Running != ok || (got[i].Err == nil) != (err == nil) {
			t.Errorf("%s: Active %+v, Get %+v %v (%v)", tok, got[i], info, ok, err)
		}
	}
	if !got[0].Running || got[0].Info.Worker != "w1" || got[0].Info.Phase != RunPhaseCompacting || got[1].Running || got[2].Running || got[3].Err == nil {
		t.Fatalf("runs: %+v", got)
	}
}

// fillRuns registers a running run of lane "running", one of "cleared"
// that it clears, and an entry of "garbled" that does not read.
func fillRuns(t *testing.T, runs *Runs) {
	t.Helper()
	ctx := t.Context()
	if _, err := runs.Register(ctx, "running", RunInfo{Session: "s1", RunID: "7", Worker: "w1", Phase: RunPhaseCompacting}); err != nil {
		t.Fatal(err)
	}
	h, err := runs.Register(ctx, "cleared", RunInfo{Session: "s2", RunID: "8", Worker: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := runs.kv.Put(ctx, "garbled", []byte("{")); err != nil {
		t.Fatal(err)
	}
}

// TestRunsActiveWithoutDirect: a registry stream that answers no Direct
// Get (AllowDirect off: one an operator or an older version made, or
// turned off after a worker bound it) is read one entry at a time, with
// the same answer; the old Active failed on it ("status 503").
func TestRunsActiveWithoutDirect(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Second)
	ctx, js := t.Context(), b.js
	opened, err := OpenRuns(ctx, js, RunsConfig{MaxAge: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	fillRuns(t, opened)
	tokens := []string{"running", "cleared", "never", "garbled", "running"}
	check := func(what string, runs *Runs) {
		t.Helper()
		for range 2 { // the first finds the Direct Get refused, the second knows
			got, err := runs.Active(ctx, tokens)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if !got[0].Running || got[0].Info.Worker != "w1" || got[0].Info.Phase != RunPhaseCompacting || got[4] != got[0] ||
				got[1].Running || got[2].Running || got[3].Err == nil || got[3].Running {
				t.Fatalf("%s: %+v", what, got)
			}
		}
	}
	check("with Direct Get", opened)

	st, err := js.Stream(ctx, "KV_"+DefaultRunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	check("turned off after the bind", opened)
	bound, err := BindRuns(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	check("bound without", bound)
}
