package fenced_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
	"github.com/lanefleet/lanefleet/lanes/internal/lanestest"
)

// testEmitter returns an emitter of run on lane "fence" that records
// whether it was told its events were fenced.
// now is its clock (nil: the wall clock).
func testEmitter(t *testing.T, js jetstream.JetStream, streams *lanes.Streams, run string, window int, now func() time.Time) (*fenced.Emitter, <-chan error) {
	t.Helper()
	lost := make(chan error, 1)
	return fenced.New(fenced.Config{JS: js, Events: streams.Events, Key: "fence", Run: run, Subject: "agent.ev.fence." + run,
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Window: window, Now: now,
		Lost: func(err error) { lost <- err }}), lost
}

// recorder keeps every message published under agent.ev.fence.>, in the
// order the server stored them.
type recorder struct {
	mu    sync.Mutex
	msgs  []*nats.Msg
	probe chan *nats.Msg // see ready
}

func record(t *testing.T, url string) *recorder {
	t.Helper()
	nc := natstest.Connect(t, url)
	r := &recorder{}
	sub, err := nc.Subscribe("agent.ev.fence.>", func(m *nats.Msg) {
		r.mu.Lock()
		r.msgs = append(r.msgs, m)
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	// Subscribed after the events' subscription, on the same connection:
	// a server that routes a probe here knows the events' interest too.
	r.probe = make(chan *nats.Msg, 1)
	if _, err := nc.ChanSubscribe("fence-probe", r.probe); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// ready waits until messages published on pub reach the recorder: in a
// cluster its interest reaches the other servers a moment after it
// subscribed.
func (r *recorder) ready(t *testing.T, pub *nats.Conn) {
	t.Helper()
	lanestest.WaitFor(t, "the recorder's subscription to reach the publisher's server", func() bool {
		if err := pub.Publish("fence-probe", nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.probe:
			return true
		case <-time.After(10 * time.Millisecond):
			return false
		}
	})
}

// lines renders what a raw subscriber saw: "fence:<rev>" for markers,
// "<delta>@<attempt>" for assistant events, "<stream>@<attempt>" for others.
func (r *recorder) lines(t *testing.T) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		if m.Header.Get(events.HeaderStream) == fenced.MarkerStream {
			out = append(out, "fence:"+string(m.Data))
			continue
		}
		ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamAssistant {
			out = append(out, fmt.Sprintf("%s@%d", ev.Data.Delta, ev.Attempt))
		} else {
			out = append(out, fmt.Sprintf("%s@%d", ev.Stream, ev.Attempt))
		}
	}
	return out
}

// fencing runs the zombie scenario on one server: an owner's emitter (lease
// revision 10) streams deltas, the lane's next owner (revision 20) claims
// the run and publishes, the old one keeps emitting. Every event of the old
// owner after the new claim is refused, the old emitter stops and tells its
// owner, a raw subscriber sees nothing of it after the new marker, and the
// old owner can neither claim the run again nor publish a final event.
func fencing(t *testing.T, url string, js jetstream.JetStream, streams *lanes.Streams, window int) {
	ctx := t.Context()
	rec := record(t, url)
	rec.ready(t, js.Conn())
	// The old owner's clock: a pause of its process moves it on.
	var paused atomic.Int64
	oldClock := func() time.Time { return time.Now().Add(time.Duration(paused.Load())) }
	old, lost := testEmitter(t, js, streams, "7", window, oldClock)
	if _, err := old.Open(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := old.Start(ctx, events.EventData{Phase: events.PhaseStart}, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		old.Emit(events.StreamAssistant, events.EventData{Delta: fmt.Sprintf("a%d ", i)})
	}
	if err := old.AwaitAcks(ctx); err != nil {
		t.Fatal(err)
	}

	next, _ := testEmitter(t, js, streams, "7", window, nil)
	st, err := next.Open(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	if st.Attempt != 1 || st.Finished || st.Seq < 2 {
		t.Fatalf("the next owner read %+v", st)
	}
	// The zombie wakes up from a pause and carries on.
	paused.Store(int64(time.Minute))
	for i := range 50 {
		old.Emit(events.StreamAssistant, events.EventData{Delta: fmt.Sprintf("z%d ", i)})
	}
	if err := old.Final(ctx, &events.Result{}); !errors.Is(err, kvstore.ErrLeaseLost) {
		t.Fatalf("zombie final: %v, want ErrLeaseLost", err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, kvstore.ErrLeaseLost) {
			t.Fatalf("the zombie's owner was told %v", err)
		}
	default:
		t.Fatal("the zombie's owner was not told its events were fenced")
	}
	if _, err := old.Claim(ctx, 10); !errors.Is(err, kvstore.ErrLeaseLost) {
		t.Fatalf("zombie claim over a newer marker: %v, want ErrLeaseLost", err)
	}
	old.Emit(events.StreamAssistant, events.EventData{Delta: "after "})

	if err := next.Publish(ctx, events.StreamLifecycle, events.EventData{Phase: events.PhaseRestart}, 2); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		next.Emit(events.StreamAssistant, events.EventData{Delta: fmt.Sprintf("b%d ", i)})
	}
	if err := next.Final(ctx, &events.Result{}); err != nil {
		t.Fatal(err)
	}

	// The stream: the old attempt, the new marker, then only the new one.
	stored := runLines(t, streams, "7")
	want := "lifecycle@1 a0..a49@1 lifecycle@2 b0..b49@2 final@2"
	if got := collapse(stored); got != want {
		t.Fatalf("stored events:\n got %s\nwant %s", got, want)
	}
	// What a core subscriber on the subjects saw, in order: it also sees
	// publishes the stream refused, but the woken zombie read the fence
	// before publishing anything.
	var seen []string
	lanestest.WaitFor(t, "a core subscriber to see the final event", func() bool { // core delivery trails the acks a little
		seen = rec.lines(t)
		return len(seen) > 0 && seen[len(seen)-1] == "final@2"
	})
	marker, late := -1, 0
	for i, l := range seen {
		if l == "fence:20" && marker < 0 {
			marker = i
		}
		if marker >= 0 && strings.HasSuffix(l, "@1") {
			late++
		}
	}
	if marker < 0 || late > 0 {
		t.Fatalf("a core subscriber saw %d events of the old attempt after the new owner's marker:\n%s", late, strings.Join(seen, " "))
	}
}

// runLines reads a run's stored events in order.
func runLines(t *testing.T, streams *lanes.Streams, run string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	info, err := streams.Events.Info(ctx, jetstream.WithSubjectFilter("agent.ev.fence."+run))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := uint64(1); seq <= info.State.LastSeq; {
		raw, err := streams.Events.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("agent.ev.fence."+run))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seq = raw.Sequence + 1
		ev, err := events.DecodeEvent(raw.Header.Get(events.HeaderContentType), raw.Data)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != uint64(len(out)+1) {
			t.Fatalf("event %d has seq %d", len(out)+1, ev.Seq)
		}
		if ev.Stream == events.StreamAssistant {
			out = append(out, fmt.Sprintf("%s@%d", ev.Data.Delta, ev.Attempt))
		} else {
			out = append(out, fmt.Sprintf("%s@%d", ev.Stream, ev.Attempt))
		}
	}
	return out
}

// collapse renders deltas "x0 x1 … xN" as "x0..xN" (frames joined), so a
// stream reads like "lifecycle@1 a0..a49@1 final@1".
func collapse(lines []string) string {
	var parts, deltas []string
	attempt := ""
	flush := func() {
		if len(deltas) > 0 {
			all := strings.Fields(strings.Join(deltas, " "))
			parts = append(parts, all[0]+".."+all[len(all)-1]+attempt)
			deltas = nil
		}
	}
	for _, l := range lines {
		body, at, _ := strings.Cut(l, "@")
		if strings.HasSuffix(body, " ") || strings.Contains(body, " ") {
			if len(deltas) > 0 && "@"+at != attempt {
				flush()
			}
			deltas, attempt = append(deltas, body), "@"+at
			continue
		}
		flush()
		parts = append(parts, l)
	}
	flush()
	return strings.Join(parts, " ")
}

func TestZombieEventsFenced(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js, _ := jetstream.New(nc)
	streams, err := lanes.EnsureStreams(t.Context(), js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	fencing(t, srv.URL, js, streams, fenced.WideWindow)
}

// TestZombieEventsFencedOnReplicatedStream: the same on R3, where the
// server refuses a second in-flight write expecting the fence subject
// (10164): with one event in flight per run, every delta of a fast model is
// stored, in order, coalesced into frames.
func TestZombieEventsFencedOnReplicatedStream(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	t.Parallel()
	cl := natstest.StartCluster(t, 3)
	nc := natstest.Connect(t, cl.URL())
	js, _ := jetstream.New(nc, jetstream.WithDefaultTimeout(10*time.Second))
	var streams *lanes.Streams
	natstest.Settle(t, func(ctx context.Context) (err error) {
		streams, err = lanes.EnsureStreams(ctx, js, lanes.StreamConfig{Replicas: 3})
		return err
	})
	for _, st := range []jetstream.Stream{streams.Inbound, streams.Events} {
		if c := st.CachedInfo().Config; c.AllowDirect {
			t.Fatalf("%s at R3 allows Direct Get: ownership reads could come from a lagging replica", c.Name)
		}
		natstest.WaitLeader(t, st)
		natstest.WaitWritable(t, js, st)
	}
	fencing(t, cl.URL(), js, streams, 1)

	em, _ := testEmitter(t, js, streams, "8", 1, nil)
	if _, err := em.Open(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	for i := range n {
		em.Emit(events.StreamAssistant, events.EventData{Delta: fmt.Sprintf("d%d ", i)})
	}
	if err := em.Final(t.Context(), &events.Result{}); err != nil {
		t.Fatal(err)
	}
	if n := em.Failed(); n != 0 {
		t.Fatalf("%d events not stored", n)
	}
	got := collapse(runLines(t, streams, "8"))
	if want := fmt.Sprintf("d0..d%d@0 final@0", n-1); got != want {
		t.Fatalf("stored: %s, want %s", got, want)
	}
}

// TestFenceClaimedAgainWhenItsMarkerIsGone: the stream's limits can remove
// a run's marker while the run goes on (discard old under MaxBytes); its
// owner's events are then refused, and the owner claims the run again
// instead of taking itself for fenced.
func TestFenceClaimedAgainWhenItsMarkerIsGone(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js, _ := jetstream.New(nc)
	streams, err := lanes.EnsureStreams(t.Context(), js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	em, lost := testEmitter(t, js, streams, "9", 1, nil)
	if _, err := em.Open(ctx, 5); err != nil {
		t.Fatal(err)
	}
	em.Emit(events.StreamAssistant, events.EventData{Delta: "x0 "})
	if err := em.AwaitAcks(ctx); err != nil {
		t.Fatal(err)
	}
	if err := streams.Events.Purge(ctx, jetstream.WithPurgeSubject(em.FenceSubject())); err != nil {
		t.Fatal(err)
	}
	em.Emit(events.StreamAssistant, events.EventData{Delta: "x1 "})
	if err := em.Final(ctx, &events.Result{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		t.Fatalf("the owner was told %v", err)
	default:
	}
	if got := collapse(runLines(t, streams, "9")); got != "x0..x1@0 final@0" {
		t.Fatalf("stored: %s", got)
	}
}

// TestRetryFencesTheFailedAttempt: an owner that retries a failed attempt
// under the same lease claims the run again, and from then on the server
// refuses every event of the failed attempt's emitter, which stops without
// claiming the run back and without telling its owner the lane is lost
// (it still holds it). Before, both emitters named the same lease
// revision, so the old one took the run back and stored its event after
// the retry's start.
func TestRetryFencesTheFailedAttempt(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js, _ := jetstream.New(nc)
	streams, err := lanes.EnsureStreams(t.Context(), js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	old, lost := testEmitter(t, js, streams, "11", 1, nil)
	if _, err := old.Open(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := old.Start(ctx, events.EventData{Phase: events.PhaseStart}, 1); err != nil {
		t.Fatal(err)
	}
	old.Emit(events.StreamAssistant, events.EventData{Delta: "a0 "})
	if err := old.AwaitAcks(ctx); err != nil {
		t.Fatal(err)
	}

	retry, _ := testEmitter(t, js, streams, "11", 1, nil)
	if _, err := retry.Open(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := retry.Start(ctx, events.EventData{Phase: events.PhaseRestart}, 2); err != nil {
		t.Fatal(err)
	}
	// The failed attempt's emitter still has an event on its way.
	old.Emit(events.StreamAssistant, events.EventData{Delta: "late "})
	if err := old.AwaitAcks(ctx); err == nil {
		t.Fatal("the failed attempt's events were stored after the retry claimed the run")
	}
	if err := old.Publish(ctx, events.StreamLifecycle, events.EventData{Phase: events.PhaseAborted}, 1); err == nil {
		t.Fatal("the failed attempt published after the retry claimed the run")
	}
	select {
	case err := <-lost:
		t.Fatalf("the owner was told it lost the lane: %v", err)
	default:
	}
	retry.Emit(events.StreamAssistant, events.EventData{Delta: "b0 "})
	if err := retry.Final(ctx, &events.Result{}); err != nil {
		t.Fatal(err)
	}
	if got, want := collapse(runLines(t, streams, "11")), "lifecycle@1 a0..a0@1 lifecycle@2 b0..b0@2 final@2"; got != want {
		t.Fatalf("stored events:\n got %s\nwant %s", got, want)
	}
}
