package lanes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
)

// publishIn publishes an inbound message as given.
func (f *fleet) publishIn(t *testing.T, key string, in *events.Inbound) uint64 {
	t.Helper()
	subj, _ := events.InboundSubject(key)
	ack, err := f.js.PublishMsg(t.Context(), inboundMsg(t, subj, in))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// inboundMsg is in encoded as a message to subj.
func inboundMsg(t *testing.T, subj string, in *events.Inbound) *nats.Msg {
	t.Helper()
	data, ct, err := events.EncodeInbound(in, false)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subj)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	return m
}

func (f *fleet) setQueue(t *testing.T, key string, q events.QueueSettings) uint64 {
	t.Helper()
	return f.publishIn(t, key, &events.Inbound{QueueSettings: &q})
}

// runEvents returns every event of a run, up to its final event.
func (f *fleet) runEvents(t *testing.T, key string, seq uint64) []*events.Event {
	t.Helper()
	subj, _ := events.EventSubject(key, fmt.Sprint(seq))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cons, err := f.streams.Events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	var out []*events.Event
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("events of %s/%d after %d: %v", key, seq, len(out), err)
		}
		ev, err := events.DecodeEvent(m.Headers().Get(events.HeaderContentType), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
		if ev.Terminal() {
			return out
		}
	}
}

// shape renders a run's events as "stream/phase@attempt" with deltas
// collapsed, and checks that seq counts 1, 2, 3… without a gap.
func shape(t *testing.T, evs []*events.Event) string {
	t.Helper()
	var parts []string
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: %s", i, ev.Seq, strings.Join(parts, " "))
		}
		p := ev.Stream
		if ev.Data.Phase != "" {
			p += "/" + ev.Data.Phase
		}
		p += fmt.Sprintf("@%d", ev.Attempt)
		if len(parts) > 0 && parts[len(parts)-1] == p && ev.Stream == events.StreamAssistant {
			continue
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

func finalErr(ev *events.Event) string {
	if e := ev.Data.Result.Meta.Error; e != nil {
		return e.Kind
	}
	return ""
}

// TestAttemptAbortedByADeadWorker: a run whose first attempt started on a
// worker that then died is closed with an aborted event before the next
// attempt restarts it; a viewer sees every event once, seq 1, 2, 3….
func TestAttemptAbortedByADeadWorker(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	seq := f.publish(t, "dead", "again")
	// What a worker killed mid-turn leaves behind: its fence marker (every
	// owner claims the run before it publishes), a start and a delta.
	subj, _ := events.EventSubject("dead", fmt.Sprint(seq))
	marker := nats.NewMsg(subj + "." + FenceToken)
	marker.Data = []byte("1")
	marker.Header.Set(events.HeaderStream, fenced.MarkerStream)
	if _, err := f.js.PublishMsg(t.Context(), marker); err != nil {
		t.Fatal(err)
	}
	for i, ev := range []*events.Event{
		{RunID: fmt.Sprint(seq), Seq: 1, Attempt: 1, Stream: events.StreamLifecycle, Data: events.EventData{Phase: events.PhaseStart, Worker: "gone"}},
		{RunID: fmt.Sprint(seq), Seq: 2, Attempt: 1, Stream: events.StreamAssistant, Data: events.EventData{Delta: "ok ", Text: "ok "}},
	} {
		data, ct, _ := events.EncodeEvent(ev, false)
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set(events.HeaderContentType, ct)
		if _, err := f.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(i, err)
		}
	}
	f.startWorker(t, &echoHandler{}, Config{})
	f.waitFinal(t, "dead", seq)
	evs := f.runEvents(t, "dead", seq)
	want := "lifecycle/start@1 assistant@1 lifecycle/aborted@1 lifecycle/restart@2 assistant@2 lifecycle/end@2 final@2"
	if got := shape(t, evs); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if ab := evs[2]; ab.Data.Attempt != 1 || !strings.Contains(ab.Data.Error, "did not finish") {
		t.Fatalf("aborted event = %+v", ab.Data)
	}
}

// TestFailedAttemptAbortedThenRetried: an attempt that fails on a live
// worker is ended with an aborted event by that worker; the retry follows.
func TestFailedAttemptAbortedThenRetried(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	h := &echoHandler{hook: func(turn *Turn) error {
		if turn.Attempt == 1 {
			turn.Emit(events.StreamAssistant, events.EventData{Delta: "partial", Text: "partial"})
			return fmt.Errorf("provider went away")
		}
		return nil
	}}
	f.startWorker(t, h, Config{RetryDelay: time.Millisecond})
	seq := f.publish(t, "flaky", "hi")
	f.waitFinal(t, "flaky", seq)
	want := "lifecycle/start@1 assistant@1 lifecycle/aborted@1 lifecycle/restart@2 assistant@2 lifecycle/end@2 final@2"
	if got := shape(t, f.runEvents(t, "flaky", seq)); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
}

// TestStoredSettingsCollectWithCap: a session's stored settings (collect,
// cap 3, drop summarize) apply to messages without a mode: five messages
// queued behind a turn become one turn of the newest three with the
// reference's overflow summary; the two oldest end with a "dropped" final
// event saying their summary went into that turn.
func TestStoredSettingsCollectWithCap(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	h := blockingHandler(started, release)
	f.startWorker(t, h, Config{})
	zero := int64(0)
	set := f.setQueue(t, "s", events.QueueSettings{Mode: "collect", Cap: 3, Drop: "summarize", DebounceMs: &zero})
	if ev := f.waitFinal(t, "s", set); ev.Data.Result.Payloads[0].Text != "queue settings: mode collect, debounce 0ms, cap 3, drop summarize" {
		t.Fatalf("settings run = %+v", ev.Data.Result)
	}
	f.publishMode(t, "s", "hold", "followup")
	<-started
	var seqs []uint64
	for _, text := range []string{"one", "two", "three", "four", "five"} {
		seqs = append(seqs, f.publish(t, "s", text))
	}
	close(release)
	for _, s := range seqs[:2] {
		ev := f.waitFinal(t, "s", s)
		if finalErr(ev) != events.KindDropped || !strings.Contains(ev.Data.Result.Meta.Error.Message, "summarized") ||
			!strings.Contains(ev.Data.Result.Meta.Error.Message, fmt.Sprint(seqs[2])) {
			t.Fatalf("run %d final = %+v", s, ev.Data.Result.Meta.Error)
		}
	}
	ev := f.waitFinal(t, "s", seqs[2])
	want := "ok [Queued messages while agent was busy]\n\n[Queue overflow] Dropped 2 messages due to cap.\nSummary:\n- one\n- two\n\n---\nQueued #1\nthree\n\n---\nQueued #2\nfour\n\n---\nQueued #3\nfive"
	if got := ev.Data.Result.Payloads[0].Text; got != want {
		t.Fatalf("merged reply:\n%s\nwant\n%s", got, want)
	}
	if c := ev.Data.Result.Meta.Consumed; len(c) != 4 || c[0].RunID != fmt.Sprint(seqs[0]) || c[0].Kind != events.KindDropped || c[3].Kind != "" {
		t.Fatalf("consumed = %+v", c)
	}
	for _, s := range seqs[3:] {
		if ev := f.waitFinal(t, "s", s); ev.Data.Result.Meta.MergedInto != fmt.Sprint(seqs[2]) {
			t.Fatalf("run %d final = %+v", s, ev.Data.Result.Meta)
		}
	}
	// The settings are stored in the lanes bucket under <token>.settings.
	raw, err := f.lanes.Settings(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	var q events.QueueSettings
	if err := json.Unmarshal(raw, &q); err != nil || q.String() != "mode collect, debounce 0ms, cap 3, drop summarize" {
		t.Fatalf("stored settings %s: %v", raw, err)
	}
}

// TestCollectDropPolicies: over the cap, drop policy old evicts the oldest
// messages and new refuses the newest; each dropped message's run ends
// with a "dropped" final event naming the policy.
func TestCollectDropPolicies(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		drop       string
		kept       []string
		droppedIdx []int
		reasonPart string
	}{
		{"old", []string{"c", "d"}, []int{0, 1}, "drop policy old"},
		{"new", []string{"a", "b"}, []int{2, 3}, "drop policy new"},
	} {
		t.Run(tt.drop, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 5*time.Second, 5*time.Second)
			started, release := make(chan struct{}), make(chan struct{})
			f.startWorker(t, blockingHandler(started, release), Config{})
			f.setQueue(t, "d", events.QueueSettings{Mode: "collect", Cap: 2, Drop: tt.drop})
			f.publish(t, "d", "hold")
			<-started
			var seqs []uint64
			for _, text := range []string{"a", "b", "c", "d"} {
				seqs = append(seqs, f.publish(t, "d", text))
			}
			// A follow-up closes the batch: no debounce wait.
			after := f.publishMode(t, "d", "after", "followup")
			close(release)
			for _, i := range tt.droppedIdx {
				ev := f.waitFinal(t, "d", seqs[i])
				if finalErr(ev) != events.KindDropped || !strings.Contains(ev.Data.Result.Meta.Error.Message, tt.reasonPart) {
					t.Fatalf("run of %d: %+v", i, ev.Data.Result.Meta.Error)
				}
			}
			head := seqs[tt.droppedIdx[0]^2] // the first kept message
			if tt.drop == "new" {
				head = seqs[0]
			}
			ev := f.waitFinal(t, "d", head)
			got := ev.Data.Result.Payloads[0].Text
			for i, k := range tt.kept {
				if !strings.Contains(got, fmt.Sprintf("Queued #%d\n%s", i+1, k)) {
					t.Fatalf("merged reply %q lacks %q", got, k)
				}
			}
			if strings.Contains(got, "Queue overflow") {
				t.Fatalf("policy %s summarised: %q", tt.drop, got)
			}
			if ev := f.waitFinal(t, "d", after); ev.Data.Result.Payloads[0].Text != "ok after" {
				t.Fatalf("after = %+v", ev.Data.Result)
			}
		})
	}
}

// TestCollectDebounce: a collect batch queued behind a turn waits until the
// lane has been quiet for the debounce time, so a message sent during that
// wait joins it; a batch that reaches the cap runs without waiting.
func TestCollectDebounce(t *testing.T) {
	t.Parallel()
	t.Run("joins while waiting", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, 5*time.Second, 5*time.Second)
		started, release := make(chan struct{}), make(chan struct{})
		f.startWorker(t, blockingHandler(started, release), Config{})
		minute := int64(60_000)
		f.setQueue(t, "w", events.QueueSettings{Mode: "collect", DebounceMs: &minute})
		hold := f.publish(t, "w", "hold")
		<-started
		a := f.publish(t, "w", "a")
		close(release)
		f.waitFinal(t, "w", hold)
		// The batch [a] now waits for a quiet minute: b joins it, then a
		// follow-up closes it.
		b := f.publish(t, "w", "b")
		f.publishMode(t, "w", "stop", "followup")
		ev := f.waitFinal(t, "w", a)
		if got := ev.Data.Result.Payloads[0].Text; !strings.Contains(got, "Queued #2\nb") {
			t.Fatalf("batch reply %q lacks b", got)
		}
		if ev := f.waitFinal(t, "w", b); ev.Data.Result.Meta.MergedInto != fmt.Sprint(a) {
			t.Fatalf("b = %+v", ev.Data.Result.Meta)
		}
	})
	t.Run("interrupt drops the waiting batch", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, 5*time.Second, 5*time.Second)
		started, release := make(chan struct{}), make(chan struct{})
		f.startWorker(t, blockingHandler(started, release), Config{})
		minute := int64(60_000)
		f.setQueue(t, "i", events.QueueSettings{Mode: "collect", DebounceMs: &minute})
		hold := f.publish(t, "i", "hold")
		<-started
		a := f.publish(t, "i", "a")
		b := f.publish(t, "i", "b")
		close(release)
		f.waitFinal(t, "i", hold)
		stop := f.publishMode(t, "i", "stop", "interrupt")
		for _, s := range []uint64{a, b} {
			if k := finalErr(f.waitFinal(t, "i", s)); k != events.KindInterrupted {
				t.Fatalf("run %d ended with %q, want interrupted", s, k)
			}
		}
		if got := f.waitFinal(t, "i", stop).Data.Result.Payloads[0].Text; got != "ok stop" {
			t.Fatalf("interrupt message = %q", got)
		}
	})
	t.Run("cap ends the wait", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, 5*time.Second, 5*time.Second)
		started, release := make(chan struct{}), make(chan struct{})
		f.startWorker(t, blockingHandler(started, release), Config{})
		minute := int64(60_000) // the longest
		f.setQueue(t, "c", events.QueueSettings{Mode: "collect", DebounceMs: &minute, Cap: 2})
		hold := f.publish(t, "c", "hold")
		<-started
		a := f.publish(t, "c", "a")
		close(release)
		f.waitFinal(t, "c", hold)
		f.publish(t, "c", "b") // fills the batch: it runs at once
		if got := f.waitFinal(t, "c", a).Data.Result.Payloads[0].Text; !strings.Contains(got, "Queued #2\nb") {
			t.Fatalf("batch reply %q", got)
		}
	})
}

// TestSteerBacklog: a steer-backlog message is shown to the running turn
// and still runs as its own turn afterwards; a steer message behind it
// waits and joins that later turn.
func TestSteerBacklog(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	f.startWorker(t, HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		if turn.Inbound.Text == "hold" {
			close(started)
			<-release
		}
		text := turn.Inbound.Text
		for _, in := range turn.Steer(ctx) {
			text += "+" + in.Text
		}
		return (&echoHandler{}).HandleTurn(ctx, &Turn{SessionKey: turn.SessionKey, RunID: turn.RunID, Inbound: &events.Inbound{Text: text}, em: turn.em})
	}), Config{})
	hold := f.publish(t, "b", "hold")
	<-started
	backlog := f.publishMode(t, "b", "B", "steer-backlog")
	steer := f.publishMode(t, "b", "S", "steer")
	close(release)
	if got := f.waitFinal(t, "b", hold).Data.Result.Payloads[0].Text; got != "ok hold+B" {
		t.Fatalf("the running turn answered %q, want it to see B only", got)
	}
	evs := f.runEvents(t, "b", backlog)
	if got := shape(t, evs); !strings.HasPrefix(got, "lifecycle/steered@0 lifecycle/start@1") {
		t.Fatalf("backlog run events: %s", got)
	}
	if evs[0].Data.Text != fmt.Sprint(hold) {
		t.Fatalf("steered into %q, want %d", evs[0].Data.Text, hold)
	}
	if got := evs[len(evs)-1].Data.Result.Payloads[0].Text; got != "ok B+S" {
		t.Fatalf("backlog's own turn answered %q", got)
	}
	if ev := f.waitFinal(t, "b", steer); ev.Data.Result.Meta.MergedInto != fmt.Sprint(backlog) {
		t.Fatalf("steer run = %+v", ev.Data.Result.Meta)
	}
}

// TestNextOwnerEndsConsumedRuns: when the owner died after committing a
// merged turn but before ending the merged messages' runs, the lane's next
// owner ends them from the turn's record.
func TestNextOwnerEndsConsumedRuns(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	started, release := make(chan struct{}), make(chan struct{})
	stop := f.startWorker(t, blockingHandler(started, release), Config{})
	zero := int64(0)
	f.setQueue(t, "e", events.QueueSettings{DebounceMs: &zero})
	f.publish(t, "e", "hold")
	<-started
	a := f.publishMode(t, "e", "a", "collect")
	b := f.publishMode(t, "e", "b", "collect")
	close(release)
	f.waitFinal(t, "e", b)
	stop()
	// Forget the merged run's final events, as if the owner died first.
	subj, _ := events.EventSubject("e", fmt.Sprint(b))
	if err := f.streams.Events.Purge(t.Context(), jetstream.WithPurgeSubject(subj)); err != nil {
		t.Fatal(err)
	}
	f.startWorker(t, &echoHandler{}, Config{})
	f.publish(t, "e", "wake up")
	if ev := f.waitFinal(t, "e", b); ev.Data.Result.Meta.MergedInto != fmt.Sprint(a) {
		t.Fatalf("restored final of b = %+v", ev.Data.Result.Meta)
	}
}
