package fleet

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
)

// TestShortRunsAreNotListed: a run that ends within registerAfter never
// writes the active-run registry (two writes a turn saved); a longer one is
// listed while it runs and gone once it ends. The registry's own updates
// (a watch from before the send) say so, not polls.
func TestShortRunsAreNotListed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		delay time.Duration // before each of the echo's deltas
		// after: registerAfter of the test, far longer than the short
		// run on any box, far shorter than the long one.
		after  time.Duration
		listed bool
	}{
		{"short", 0, time.Hour, false},
		{"long", 200 * time.Millisecond, time.Millisecond, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, c, ctx := runMember(t, Config{DataDir: t.TempDir(), ScriptedDelay: tc.delay, registerAfter: tc.after})
			kv, err := m.JS.KeyValue(ctx, kvstore.DefaultRunsBucket)
			if err != nil {
				t.Fatal(err)
			}
			w, err := kv.WatchAll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Stop() }()
			for e := range w.Updates() { // nil: what the bucket held is read
				if e == nil {
					break
				}
			}
			run, err := c.Send(ctx, "reg-"+tc.name, "hello there")
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range run.Events(ctx) {
				if err != nil {
					t.Fatal(err)
				}
			}
			if !tc.listed {
				st, err := m.JS.Stream(ctx, "KV_"+kvstore.DefaultRunsBucket)
				if err != nil {
					t.Fatal(err)
				}
				info, err := st.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if info.State.LastSeq != 0 {
					t.Errorf("a %v run wrote the registry %d times; want none", tc.delay, info.State.LastSeq)
				}
				return
			}
			// Listed with this run, then cleared once it ended (in the
			// background: the watch waits for it).
			listed := false
			for e := range w.Updates() {
				if e.Operation() == jetstream.KeyValuePut {
					var info kvstore.RunInfo
					if err := json.Unmarshal(e.Value(), &info); err != nil {
						t.Fatal(err)
					}
					listed = listed || info.RunID == run.ID
					continue
				}
				if !listed {
					t.Fatalf("the entry %s was removed before the run was listed", e.Key())
				}
				return
			}
			t.Fatalf("the watch ended (%v) before the run's entry was listed and cleared (listed: %v)", ctx.Err(), listed)
		})
	}
}

// nopSink drops a run's events.
type nopSink struct{}

func (nopSink) Emit(string, events.EventData) {}

// logLines is a log writer that hands each line to a channel.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) { l <- string(p); return len(p), nil }

// TestPhaseSinkDoesNotWait: a compaction's phase is handed to the registry's
// writer; the runner's Emit returns while the registry's write waits on
// a server that is gone. (Before, Emit waited for the entry's write and
// then the phase's, up to 5 s each, on the runner's goroutine.)
func TestPhaseSinkDoesNotWait(t *testing.T) {
	t.Parallel()
	m, err := startMember(t, Config{DataDir: t.TempDir(), registerAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m.Server.Shutdown() // every registry write now waits for stateTimeout
	r := m.register(t.Context(), &lanes.Turn{SessionKey: "phase-wait", RunID: "1", Attempt: 1})
	emitted := make(chan struct{})
	go func() {
		defer close(emitted)
		(&phaseSink{Sink: nopSink{}, reg: r}).Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseStart})
	}()
	<-emitted
	r.mu.Lock()
	writing := r.writing
	r.mu.Unlock()
	if !writing {
		t.Fatal("Emit returned only after the registry's writer had given up its write")
	}
	r.clear(t.Context())
	m.bg.Wait()
}

// TestPhaseWriteFailureLoggedOnce: a run whose phase writes fail (its
// entry was replaced under it) says so once, not once a compaction, and
// never fails the run. (Before, the error was dropped.)
func TestPhaseWriteFailureLoggedOnce(t *testing.T) {
	t.Parallel()
	m, err := startMember(t, Config{DataDir: t.TempDir(), registerAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lines := make(logLines, 16)
	m.log = zerolog.New(lines)
	ctx := t.Context()
	kv, err := m.JS.KeyValue(ctx, kvstore.DefaultRunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := events.KeyToken("phase-log")
	w, err := kv.Watch(ctx, tok, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	r := m.register(ctx, &lanes.Turn{SessionKey: "phase-log", RunID: "1", Attempt: 1})
	sink := &phaseSink{Sink: nopSink{}, reg: r}
	sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseStart})
	// The entry is written (at once: it compacts), then its phase.
	for e := range w.Updates() {
		var info kvstore.RunInfo
		if err := json.Unmarshal(e.Value(), &info); err != nil {
			t.Fatal(err)
		}
		if info.Phase == kvstore.RunPhaseCompacting {
			break
		}
	}
	if _, err := kv.Put(ctx, tok, []byte(`{"run_id":"other"}`)); err != nil {
		t.Fatal(err)
	}
	// Each phase write is a publish on the entry's subject, which a
	// plain subscriber sees even when the bucket refuses it.
	writes, err := m.JS.Conn().SubscribeSync("$KV." + kvstore.DefaultRunsBucket + "." + tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.JS.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	// Three phases, each emitted once the writer has written the one
	// before it: two failed writes at least.
	for _, phase := range []string{"end", "start", "end"} {
		sink.Emit(events.StreamCompaction, events.EventData{Phase: phase})
		if _, err := writes.NextMsg(time.Minute); err != nil {
			t.Fatalf("the %s phase was not written: %v", phase, err)
		}
	}
	r.clear(ctx)
	m.bg.Wait()
	close(lines)
	var logged []string
	for l := range lines {
		logged = append(logged, l)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "phase not written") {
		t.Fatalf("logged %q; want one line saying the phase was not written", logged)
	}
}

// TestRegistrationHoldsNoTimer: a turn's registry entry waiting to fall
// due holds its registration and its place in the member's due line,
// not a timer of its own (112 bytes, and a closure: docs/scaling.md,
// "What a turn in flight holds"). Not parallel: the heap is the whole
// process's.
func TestRegistrationHoldsNoTimer(t *testing.T) {
	m, err := startMember(t, Config{DataDir: t.TempDir(), registerAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	turns := make([]lanes.Turn, n)
	for i := range turns {
		turns[i] = lanes.Turn{SessionKey: fmt.Sprintf("due-%d", i), RunID: "1", Attempt: 1}
	}
	regs := make([]*registration, 0, n)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	for i := range turns {
		regs = append(regs, m.register(t.Context(), &turns[i]))
	}
	per := (float64(heap()) - float64(before)) / n
	runtime.KeepAlive(turns)
	for _, r := range regs {
		r.clear(t.Context())
	}
	m.bg.Wait()
	t.Logf("a registration waiting to fall due holds %.0f bytes", per)
	if per > 300 {
		t.Fatalf("a registration waiting to fall due holds %.0f bytes; want at most 300 (its timer was 112 more)", per)
	}
}

// TestDueLineStoppedWithMember: a member that stopped holds no armed
// timer for the registrations that ended in its due line; the timer held
// the member, and them, until it went off.
func TestDueLineStoppedWithMember(t *testing.T) {
	t.Parallel()
	var m *Member
	t.Cleanup(func() { // after the member's Run returned (cleanups run last first)
		m.due.mu.Lock()
		defer m.due.mu.Unlock()
		if n := len(m.due.line) - m.due.head; n != 0 || m.due.timer == nil || m.due.timer.Stop() {
			t.Errorf("the stopped member's due line holds %d registrations, its timer armed", n)
		}
	})
	m, _, ctx := runMember(t, Config{DataDir: t.TempDir(), registerAfter: time.Hour})
	m.register(ctx, &lanes.Turn{SessionKey: "due-stop", RunID: "1", Attempt: 1}).clear(ctx)
}
