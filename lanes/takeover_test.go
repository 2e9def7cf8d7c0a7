package lanes

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
)

// heldFirstHandler holds a lane's first attempt until released, and echoes
// every other attempt; it records which worker ran which attempt.
type heldFirstHandler struct {
	echoHandler
	started  chan string // worker id of each attempt begun
	release  chan struct{}
	firstErr chan error // what the held first attempt's turn context said
	mu       sync.Mutex
	attempts []int
}

func newHeldFirstHandler() *heldFirstHandler {
	return &heldFirstHandler{started: make(chan string, 16), release: make(chan struct{}), firstErr: make(chan error, 1)}
}

func (h *heldFirstHandler) HandleTurn(ctx context.Context, t *Turn) (*Outcome, error) {
	h.mu.Lock()
	h.attempts = append(h.attempts, t.Attempt)
	h.mu.Unlock()
	h.started <- t.Worker
	if t.Attempt == 1 {
		select {
		case <-ctx.Done():
			h.firstErr <- context.Cause(ctx)
		case <-h.release:
			h.firstErr <- nil
		}
	}
	return h.echoHandler.HandleTurn(ctx, t)
}

// next waits for the next attempt to begin, well within AckWait and the
// lease TTL (a minute each in these tests), and returns its worker.
func (h *heldFirstHandler) next(t *testing.T) string {
	t.Helper()
	select {
	case w := <-h.started:
		return w
	case <-time.After(30 * time.Second):
		t.Fatal("no attempt began within 30 s")
		return ""
	}
}

// livenessWorker runs a worker with fast takeover on its own connection,
// and returns it with a func that closes its connection (the server drops
// its subscriptions as for a killed process).
func (f *fleet) livenessWorker(t *testing.T, h Handler, id string) (*Worker, func()) {
	t.Helper()
	nc := natstest.Connect(t, f.url)
	js, _ := jetstream.New(nc)
	lv, err := kvstore.OpenLiveness(t.Context(), js, kvstore.LivenessConfig{TTL: 10 * time.Second}) // no test here waits for a lapse: a CI stall of seconds must not end a life
	if err != nil {
		t.Fatal(err)
	}
	w := f.newWorker(t, nc, h, Config{ID: id, Liveness: lv, LivenessEvery: 200 * time.Millisecond}, zerolog.WarnLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the worker accepting under a life", func() bool { return w.Accepting() && w.life.Load() != nil })
	return w, nc.Close
}

// TestTakeoverAfterConnectionLoss: a worker whose connection is gone mid-turn
// (as a killed process's) has its lane resumed by a survivor long before
// AckWait and the lease TTL (a minute each here; waitFinal gives up after
// 30 s): the survivor finds the dead worker's alive subject answered by
// nobody, declares it dead, takes its lease over and re-runs the turn.
// Before fast takeover the lane waited out AckWait.
func TestTakeoverAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Minute, time.Minute)
	h := newHeldFirstHandler()
	_, kill := f.livenessWorker(t, h, "victim")
	seq := f.publish(t, "takeover", "hi")
	if w := h.next(t); w != "victim" {
		t.Fatalf("first attempt ran on %s", w)
	}
	survivor, _ := f.livenessWorker(t, h, "survivor")
	t.Cleanup(func() { close(h.release) }) // before the workers stop
	waitFor(t, "the survivor seeing the victim's life", func() bool {
		survivor.alive.mu.Lock()
		defer survivor.alive.mu.Unlock()
		return len(survivor.alive.peers) == 1
	})
	kill()
	if w := h.next(t); w != "survivor" {
		t.Fatalf("second attempt ran on %s", w)
	}
	ev := f.waitFinal(t, "takeover", seq)
	if ev.Data.Result == nil || ev.Data.Result.Payloads[0].Text != "ok hi" {
		t.Fatalf("final: %+v", ev.Data)
	}
	if n := survivor.Stats().TakenOver.Load(); n != 1 {
		t.Fatalf("survivor took over %d lanes, want 1", n)
	}
	if n := f.finals(t, "takeover", seq); n != 1 {
		t.Fatalf("%d final events, want 1", n)
	}
}

// TestDeclaredDeadWorkerFencedOut: a worker declared dead while it still
// runs (a pause past the others' patience) stops its turn as soon as its
// beat is refused, its late commit is fenced out, and it goes on under a
// new life; the survivor's re-run is the one record and the one final.
func TestDeclaredDeadWorkerFencedOut(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Minute, time.Minute)
	h := newHeldFirstHandler()
	victim, _ := f.livenessWorker(t, h, "victim")
	seq := f.publish(t, "fenced", "hi")
	if w := h.next(t); w != "victim" {
		t.Fatalf("first attempt ran on %s", w)
	}
	survivor, _ := f.livenessWorker(t, h, "survivor")
	old := f.declareDead(t, victim)
	// The survivor, told of the death at once, nearly always re-runs the
	// turn; on a starved machine the victim's next beat can come first,
	// give the lease up, and its new life take the lane back. Either is
	// right: what counts is that the old life's turn is fenced out.
	second := h.next(t)
	if second != "survivor" && second != "victim" {
		t.Fatalf("second attempt ran on %s", second)
	}
	// The victim's held turn is told its lease is gone.
	select {
	case err := <-h.firstErr:
		if !errors.Is(err, kvstore.ErrLeaseLost) || !errors.Is(err, kvstore.ErrDeclaredDead) {
			t.Fatalf("the declared-dead worker's turn ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the declared-dead worker's turn went on")
	}
	f.waitFinal(t, "fenced", seq)
	waitFor(t, "the victim under a new life", func() bool { cur := victim.life.Load(); return cur != nil && cur.key != old.key })
	// (Taking the lease over, rather than sweeping the lane after the
	// victim gave it up, is TestTakeoverAfterConnectionLoss's to show.)
	if n := survivor.Stats().TakenOver.Load(); n > 1 {
		t.Fatalf("survivor took over %d lanes, want at most 1", n)
	}
	// The victim's turn returned after its lane was taken: nothing of it
	// is stored. Wait until the victim's owner is gone before counting.
	waitFor(t, "the victim letting the lane go", func() bool { return victim.Held() == 0 })
	if n := f.finals(t, "fenced", seq); n != 1 {
		t.Fatalf("%d final events, want 1", n)
	}
	if texts := f.transcriptTexts(t, "fenced"); len(texts) != 2 {
		t.Fatalf("transcript %q, want one turn", texts)
	}
}

// TestStepNotRecordedPastLife: a turn whose worker confirmed no beat for
// the liveness TTL (it was frozen: the others may have taken its lanes)
// records no step and goes no further, before any write; a life within
// its TTL lets it on, and an ended one says why it ended.
func TestStepNotRecordedPastLife(t *testing.T) {
	t.Parallel()
	ctx, end := context.WithCancelCause(context.Background())
	defer end(nil)
	frozen := &life{ctx: ctx, base: time.Now().Add(-time.Minute)}
	frozen.confirmed(0, time.Second) // its last beat sent a minute ago, TTL 1 s
	s := &StepLog{life: frozen}      // no journal: a write would panic
	if err := s.Put(context.Background(), 1, []byte("step")); !errors.Is(err, kvstore.ErrDeclaredDead) {
		t.Fatalf("a step past the life's TTL: %v", err)
	}
	// Until the beat loop knows, it may be the store that is down: the
	// attempt ends as on a store error, which does not count.
	if err := s.storeError(); !errors.Is(err, kvstore.ErrDeclaredDead) {
		t.Fatalf("store error of the attempt: %v", err)
	}
	var none *life
	if _, err := none.check(); err != nil {
		t.Fatalf("no life: %v", err)
	}
	alive := &life{ctx: ctx, base: time.Now()}
	alive.confirmed(0, time.Minute)
	if _, err := alive.check(); err != nil {
		t.Fatalf("a life within its TTL: %v", err)
	}
	why := errors.New("declared dead")
	end(why)
	if lapsed, err := alive.check(); !errors.Is(err, why) || lapsed {
		t.Fatalf("an ended life: %v %v", err, lapsed)
	}
}

// TestDeclaredDeadWorkerLetsItsLaneGo: a worker declared dead that nobody
// takes over from (here it is alone; in a fleet, a lease it took or
// renewed after the survivors looked) lets its stopped owner's lease go,
// so the lane's turn runs again at once rather than after the lease TTL
// (a minute here; next gives up after 30 s).
func TestDeclaredDeadWorkerLetsItsLaneGo(t *testing.T) {
	t.Parallel()
	f := newFleet(t, time.Minute, time.Minute)
	h := newHeldFirstHandler()
	victim, _ := f.livenessWorker(t, h, "victim")
	t.Cleanup(func() { close(h.release) })
	seq := f.publish(t, "alone", "hi")
	if w := h.next(t); w != "victim" {
		t.Fatalf("first attempt ran on %s", w)
	}
	f.declareDead(t, victim)
	if w := h.next(t); w != "victim" {
		t.Fatalf("second attempt ran on %s", w)
	}
	f.waitFinal(t, "alone", seq)
	if n := f.finals(t, "alone", seq); n != 1 {
		t.Fatalf("%d final events, want 1", n)
	}
}

// declareDead declares w's current life (returned) dead at its current revision, as
// a survivor that found its connection gone would (a beat in between
// moves the revision on: it tries again).
func (f *fleet) declareDead(t *testing.T, w *Worker) *life {
	t.Helper()
	old := w.life.Load()
	kv, err := f.js.KeyValue(t.Context(), kvstore.DefaultLivenessBucket)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the victim declared dead", func() bool {
		e, err := kv.Get(t.Context(), old.key)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := w.cfg.Liveness.Declare(t.Context(), old.key, e.Revision())
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	return old
}
