package lanes

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes/internal/lanestest"
)

// pauses is a Config.Paused the test sets.
type pauses struct {
	mu  sync.Mutex
	set map[string]bool
}

func (p *pauses) paused(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.set[key]
}

func (p *pauses) put(key string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set[key] = on
}

// TestPausedLaneWaitsAndWakes: a session paused by its third turn (as a
// budget reached mid-turn pauses it) runs none of its later messages: they
// stay on the lane, neither dead-lettered nor refused, and a message sent
// while it is paused waits too. Once the pause ends, Wake takes the lane up
// and every waiting message runs, in order, exactly once; another session
// is never held up.
func TestPausedLaneWaitsAndWakes(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	p := &pauses{set: map[string]bool{}}
	const key = "acme:1"
	h := &echoHandler{hook: func(tr *Turn) error {
		if tr.Inbound.Text == "m3" {
			p.put(key, true) // the budget is reached during this turn
		}
		return nil
	}}
	const notice = "Budget reached: the message waits in the queue."
	cfg := Config{Concurrency: 4, Paused: p.paused, Tenant: func(k string) string { return k[:4] }, PauseNotice: func(string) string { return notice }}
	var workers []*Worker
	for range 2 {
		w := f.newWorker(t, natstest.Connect(t, f.url), h, cfg, zerolog.WarnLevel)
		workers = append(workers, w)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	pausedLetGo := func() int64 { return workers[0].Stats().Paused.Load() + workers[1].Stats().Paused.Load() }
	var seqs []uint64
	for i := 1; i <= 6; i++ {
		seqs = append(seqs, f.publish(t, key, fmt.Sprintf("m%d", i)))
	}
	other := f.publish(t, "other", "o1")
	if got := f.waitFinal(t, key, seqs[2]).Data.Result.Payloads[0].Text; got != "ok m3" {
		t.Fatalf("m3's final: %q", got)
	}
	f.waitFinal(t, "other", other)
	lanestest.WaitFor(t, "an owner to let the paused lane go", func() bool { return pausedLetGo() >= 1 })
	// A message sent while paused wakes an owner, which lets the lane go.
	before := pausedLetGo()
	seqs = append(seqs, f.publish(t, key, "m7"))
	lanestest.WaitFor(t, "the paused lane's delivery to be let go", func() bool { return pausedLetGo() > before })
	for _, seq := range seqs[3:] {
		if _, err := f.streams.Inbound.GetMsg(t.Context(), seq); err != nil {
			t.Fatalf("message %d left the lane while paused: %v", seq, err)
		}
	}
	// Each waiting message's sender was told at once why it waits: a
	// paused event on its run, its first event, once.
	for _, seq := range seqs[3:] {
		if evs := f.firstEvents(t, key, seq, 1); evs[0].Data.Phase != events.PhasePaused || evs[0].Data.Text != notice {
			t.Fatalf("message %d's first event %+v, want the paused notice", seq, evs[0].Data)
		}
	}
	h.mu.Lock()
	seen := slices.Clone(h.seen[key])
	h.mu.Unlock()
	if !slices.Equal(seen, []string{"m1", "m2", "m3"}) {
		t.Fatalf("ran %v while paused, want m1-m3", seen)
	}
	// The pause ends (the budget raised): Wake, on every worker.
	p.put(key, false)
	woken := 0
	for _, w := range workers {
		woken += w.Wake(t.Context(), func(k string) bool { return k == key })
	}
	if woken == 0 {
		t.Fatal("Wake took no lane")
	}
	if got := f.waitFinal(t, key, seqs[6]).Data.Result.Payloads[0].Text; got != "ok m7" {
		t.Fatalf("m7's final: %q", got)
	}
	h.mu.Lock()
	seen = slices.Clone(h.seen[key])
	h.mu.Unlock()
	if want := []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7"}; !slices.Equal(seen, want) {
		t.Fatalf("ran %v, want %v (in order, once each)", seen, want)
	}
	// One notice each: the woken run starts after it.
	for _, seq := range seqs[3:] {
		if evs := f.firstEvents(t, key, seq, 2); evs[1].Data.Phase != events.PhaseStart {
			t.Fatalf("message %d's events %+v, %+v: want one paused notice, then its start", seq, evs[0].Data, evs[1].Data)
		}
	}
	for _, w := range workers {
		if n := w.Stats().DeadLetters.Load(); n != 0 {
			t.Fatalf("%d dead letters", n)
		}
	}
	// The start events name the tenant.
	subj, _ := events.EventSubject(key, fmt.Sprint(seqs[0]))
	cons, err := f.streams.Events.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.DecodeEvent(m.Headers().Get(events.HeaderContentType), m.Data())
	if err != nil || ev.Data.Phase != events.PhaseStart || ev.Data.Tenant != "acme" {
		t.Errorf("first event %+v (%v), want a start naming tenant acme", ev, err)
	}
}

// firstEvents reads the first n events of the run of seq on key's lane.
func (f *fleet) firstEvents(t *testing.T, key string, seq uint64, n int) []events.Event {
	t.Helper()
	subj, _ := events.EventSubject(key, fmt.Sprint(seq))
	cons, err := f.streams.Events.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for len(out) < n {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("run %d: %d events of %d: %v", seq, len(out), n, err)
		}
		ev, err := events.DecodeEvent(m.Headers().Get(events.HeaderContentType), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, *ev)
	}
	return out
}
