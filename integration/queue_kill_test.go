package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
)

// waitForFleet waits until a worker process has created the streams and the
// lanes bucket.
func waitForFleet(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	// The bound only detects a hang: a worker process starts late on a
	// loaded machine.
	waitUntil(t, 2*time.Minute, "a worker process creating the streams", func(ctx context.Context) bool {
		_, err := js.Stream(ctx, events.InboundStream)
		if err == nil {
			_, err = kvstore.Bind(ctx, js, "")
		}
		return err == nil
	})
}

// runEventsOf reads every stored event of a run, however many finals it has.
func runEventsOf(t *testing.T, js jetstream.JetStream, session, run string) []*events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	subj, err := events.EventSubject(session, run)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	n := info.State.Subjects[subj]
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	out := make([]*events.Event, 0, n)
	for range n {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := events.DecodeEvent(m.Headers().Get(events.HeaderContentType), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// checkRun asserts a run's stored events are seq 1..n without gap or repeat,
// with exactly one final event, the last; it returns that final's result
// and the lifecycle phases seen, as "phase@attempt".
//
// It first waits, a minute at most, for the stored events to end with a
// final: a client's Wait, or a drained lane, can come before the stream
// has stored it (under -race on a loaded machine the steered run's final
// was missing from a read right after both).
func checkRun(t *testing.T, js jetstream.JetStream, session, run string) (*events.Result, []string) {
	t.Helper()
	var evs []*events.Event
	start := time.Now()
	for reads := 1; ; reads++ {
		evs = runEventsOf(t, js, session, run)
		if len(evs) > 0 && evs[len(evs)-1].Terminal() {
			if reads > 1 {
				t.Logf("run %s: its final was stored %v after the first read", run, time.Since(start).Round(time.Millisecond))
			}
			break
		}
		if time.Since(start) > time.Minute {
			break
		}
		time.Sleep(50 * time.Millisecond) // the stored events: polled, nothing to wait on
	}
	var phases []string
	finals := 0
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("run %s: event %d has seq %d", run, i, ev.Seq)
		}
		if ev.Terminal() {
			finals++
		}
		if ev.Stream == events.StreamLifecycle {
			phases = append(phases, fmt.Sprintf("%s@%d", ev.Data.Phase, ev.Attempt))
		}
	}
	if finals != 1 || len(evs) == 0 || !evs[len(evs)-1].Terminal() {
		t.Fatalf("run %s: %d final events in %d events (phases %v)", run, finals, len(evs), phases)
	}
	return evs[len(evs)-1].Data.Result, phases
}

// userTexts returns the texts of a session's user entries.
func userTexts(t *testing.T, c *lanefleet.Client, session string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	hist, err := c.History(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range hist {
		if e.Message != nil && e.Message.Role == "user" {
			out = append(out, e.Message.Content.Text())
		}
	}
	return out
}

// waitStreaming follows a run until an assistant delta contains marker.
func waitStreaming(ctx context.Context, t *testing.T, r *lanefleet.Run, marker string) {
	t.Helper()
	for ev, err := range r.Events(ctx) {
		if err != nil {
			t.Fatalf("following run %s: %v", r.ID, err)
		}
		if ev.Stream == events.StreamAssistant && strings.Contains(ev.Data.Text+ev.Data.Delta, marker) {
			return
		}
		if ev.Terminal() {
			t.Fatalf("run %s ended before streaming %q", r.ID, marker)
		}
	}
}

// victimDelay is the scripted delay per delta of a worker process that a
// test kills mid-stream: long enough that a message sent, or a kill made,
// on seeing a turn stream still lands while it streams on a loaded machine
// (the survivors run at 1 ms a delta).
const victimDelay = "250ms"

// TestOwnerKilledDuringQueueModes: the worker process owning a lane is
// SIGKILLed while the lane runs a collect batch, or a turn that a steered
// message joined; a survivor takes the lane over. Every message ends
// exactly once: its own turn, merged into the turn that answered it, or an
// explicit final event; the interrupted run's viewers see start …
// aborted, restart … final with one unbroken seq; the transcript holds each
// message once.
func TestOwnerKilledDuringQueueModes(t *testing.T) {
	if testing.Short() {
		t.Skip("process crash test")
	}
	t.Parallel()
	t.Run("collect batch", func(t *testing.T) {
		t.Parallel()
		srv := natstest.Start(t)
		nc := natstest.Connect(t, srv.URL)
		js := newJS(t, nc)
		// The victim's turns are slow (a quarter second a delta): the four
		// messages must all be queued while "first" streams, and the kill
		// must land while the batch streams. At 40 ms a delta those
		// windows were 640 ms, which a loaded machine's four sends or one
		// look at the stream can outlast.
		victim, _ := startProcess(t, srv.URL, "victim", "--scripted-delay", victimDelay)
		waitForFleet(t, js)
		c, _ := lanefleet.New(nc)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()

		const session = "kill:collect"
		zero := time.Duration(0)
		set, err := c.SetQueueSettings(ctx, session, lanefleet.QueueSettings{Mode: "collect", Debounce: &zero})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := set.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		first, err := c.Send(ctx, session, "first "+strings.Repeat("word ", 15), lanefleet.WithMode("followup"))
		if err != nil {
			t.Fatal(err)
		}
		waitStreaming(ctx, t, first, "first")
		texts := []string{"alpha one", "bravo two", "charlie three", "delta four"}
		var runs []*lanefleet.Run
		for _, text := range texts {
			r, err := c.Send(ctx, session, text) // no mode: the session's collect
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, r)
		}
		// The batch runs as the first queued message's run; kill its owner
		// as soon as it streams the merged reply.
		waitStreaming(ctx, t, runs[0], "Queued")
		if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = victim.Wait()
		startProcess(t, srv.URL, "survivor", "--scripted-delay", "1ms")

		res, err := runs[0].Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, text := range texts {
			if !strings.Contains(res.Payloads[0].Text, fmt.Sprintf("Queued #%d\n%s", i+1, text)) {
				t.Fatalf("the batch's reply lacks %q: %q", text, res.Payloads[0].Text)
			}
		}
		waitDrained(t, js, 3*time.Minute)
		if _, phases := checkRun(t, js, session, runs[0].ID); strings.Join(phases, " ") != "start@1 aborted@1 restart@2 end@2" {
			t.Fatalf("batch run lifecycle = %v, want the killed attempt aborted, then a restart", phases)
		}
		if res, _ := checkRun(t, js, session, first.ID); res.Meta.Error != nil {
			t.Fatalf("first run = %+v", res.Meta)
		}
		for _, r := range runs[1:] {
			if res, _ := checkRun(t, js, session, r.ID); res.Meta.MergedInto != runs[0].ID {
				t.Fatalf("run %s = %+v, want mergedInto %s", r.ID, res.Meta, runs[0].ID)
			}
		}
		users := userTexts(t, c, session)
		all := strings.Join(users, "\n")
		for _, text := range append(texts, "first") {
			if n := strings.Count(all, text); n != 1 {
				t.Fatalf("%q appears %d times in the transcript's user entries %q", text, n, users)
			}
		}
		if len(users) != 2 {
			t.Fatalf("transcript has %d user turns, want 2 (first, the batch): %q", len(users), users)
		}
	})
	t.Run("steered turn", func(t *testing.T) {
		t.Parallel()
		srv := natstest.Start(t)
		nc := natstest.Connect(t, srv.URL)
		js := newJS(t, nc)
		// Slow, as above: the steer must arrive while "walk" streams (440 ms
		// at 40 ms a delta), and the kill while "turnleft" does.
		victim, _ := startProcess(t, srv.URL, "victim", "--scripted-delay", victimDelay)
		waitForFleet(t, js)
		c, _ := lanefleet.New(nc)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()

		const session = "kill:steer"
		long, err := c.Send(ctx, session, "walk "+strings.Repeat("step ", 10))
		if err != nil {
			t.Fatal(err)
		}
		waitStreaming(ctx, t, long, "walk")
		steer, err := c.Send(ctx, session, "turnleft "+strings.Repeat("now ", 15), lanefleet.WithMode("steer"))
		if err != nil {
			t.Fatal(err)
		}
		// The steered message is answered in the same turn, by a second
		// model call: kill the owner while that call streams.
		waitStreaming(ctx, t, long, "turnleft")
		if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = victim.Wait()
		startProcess(t, srv.URL, "survivor", "--scripted-delay", "1ms")

		res, err := long.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.Payloads[len(res.Payloads)-1].Text, "echo: turnleft") {
			t.Fatalf("the restarted turn's reply = %+v, want the answer to the steered message", res.Payloads)
		}
		waitDrained(t, js, 3*time.Minute)
		if _, phases := checkRun(t, js, session, long.ID); strings.Join(phases, " ") != "start@1 aborted@1 restart@2 end@2" {
			t.Fatalf("steered run lifecycle = %v", phases)
		}
		if res, _ := checkRun(t, js, session, steer.ID); res.Meta.MergedInto != long.ID {
			t.Fatalf("steer run = %+v, want mergedInto %s", res.Meta, long.ID)
		}
		users := userTexts(t, c, session)
		if len(users) != 2 || !strings.HasPrefix(users[0], "walk") || !strings.HasPrefix(users[1], "turnleft") {
			t.Fatalf("transcript user entries = %q, want the long message then the steered one, once each", users)
		}
	})
}
