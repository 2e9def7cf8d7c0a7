package integration

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"

	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
)

// startProcess runs cmd/worker as a separate OS process joined to url.
func startProcess(t *testing.T, url, id string, extra ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	args := append([]string{"--scripted", "--id", id, "--ack-wait", "2s", "--lease-ttl", "2s", "--log-format", "json",
		"--log-level", "warn", "--shutdown-grace", "2s"}, extra...)
	cmd := exec.Command(workerBinary(t), args...)
	cmd.Env = append(cmd.Environ(), "NATS_URL="+url)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("worker %s output:\n%s", id, logs.String())
		}
	})
	return cmd, &logs
}

// restarts counts lifecycle restart events in the event stream.
func restarts(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	n := 0
	for range info.State.Msgs {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := events.DecodeEvent(m.Headers().Get(events.HeaderContentType), m.Data())
		if err == nil && ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseRestart {
			n++
		}
	}
	return n
}

// TestWorkerKilledMidRun: a worker process is SIGKILLed while it runs turns;
// another worker process resumes its lanes from their cursors, in order, and
// every re-run turn appears once in the transcript.
func TestWorkerKilledMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("process crash test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	a, _ := startProcess(t, srv.URL, "victim", "--scripted-delay", "40ms", "--concurrency", "64")

	waitForFleet(t, js) // the victim has prepared the streams and the lanes bucket
	want := map[string][]string{}
	var msgs []outMsg
	// Ten turns of about half a second per session: the victim is still
	// running turns well after the first twenty are committed, even when
	// a busy box makes the look below slow.
	for i := range 10 {
		for s := range 20 {
			key := fmt.Sprintf("crash:%d", s)
			text := fmt.Sprintf("message %d of session %d with a few more words", i, s)
			msgs = append(msgs, outMsg{key, text, fmt.Sprintf("c-%d-%d", s, i)})
			want[key] = append(want[key], text)
		}
	}
	publishAll(t, js, msgs)

	// Kill the victim once it has finished some turns and runs turns: a
	// lane held is not enough (its owner may be waiting out the collect
	// debounce), so the active-run registry must list a run of the victim.
	// Bound through waitUntil: a loaded server may let one bind's
	// requests outwait the client's default 5 s (it failed the test so).
	var lanes *kvstore.Lanes
	waitUntil(t, time.Minute, "bind the lanes bucket", func(ctx context.Context) bool {
		var err error
		lanes, err = kvstore.Bind(ctx, js, "")
		return err == nil
	})
	var runs *kvstore.Runs
	var held, committed, running int
	deadline := time.Now().Add(time.Minute) // detects a hang only
	for {
		held, committed, running = 0, 0, 0
		for s := range 20 {
			tok, _ := events.KeyToken(fmt.Sprintf("crash:%d", s))
			if h, ok, _ := lanes.Holder(t.Context(), tok); ok && h.Worker == "victim" {
				held++
			}
			recs, _ := lanes.Records(t.Context(), tok)
			committed += len(recs)
		}
		if runs == nil {
			runs, _ = kvstore.BindRuns(t.Context(), js, "")
		}
		if runs != nil && committed >= 20 && held > 0 {
			list, _ := runs.List(t.Context())
			for _, r := range list {
				if r.Worker == "victim" {
					running++
				}
			}
		}
		if committed >= 20 && held > 0 && running > 0 {
			t.Logf("killing the victim holding %d lanes, running %d turns, after %d of %d turns", held, running, committed, len(msgs))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never saw the victim running turns after 20 were committed (last look: %d lanes held, %d of %d turns committed, %d runs listed)",
				held, committed, len(msgs), running)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.Wait()
	killed := time.Now()
	startProcess(t, srv.URL, "survivor", "--scripted-delay", "5ms")

	// The bound only detects a hang: the lanes wait out the victim's
	// lease (30 s) first, and at a load of 18 the drain took 40 s.
	waitDrained(t, js, 5*time.Minute)
	t.Logf("all lanes resumed and drained %v after the kill", time.Since(killed).Round(time.Millisecond))
	c, _ := lanefleet.New(nc)
	checkTranscripts(t, c, want)
	if n := restarts(t, js); n == 0 {
		t.Fatal("no run was restarted: the kill did not interrupt a turn")
	} else {
		t.Logf("%d interrupted runs restarted on the survivor", n)
	}
}

// TestGracefulStopHandsLanesOver: a worker stopped under load finishes its
// running turns, releases its lanes and Naks their triggers, so the other
// worker takes them over at once. AckWait (and the sweep, which follows it) is
// ten minutes here: the lanes can only drain within the test's five minutes
// (half of it) if the stop handed them over, so no timing is asserted. (One
// minute was too short under -race on a loaded machine: the staying worker,
// starved past its liveness TTL, declared itself dead twice, took its own
// lanes over and was still draining them, 92 deliveries in hand, when the
// minute ran out.)
func TestGracefulStopHandsLanesOver(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet load test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	cfg := fleet.Config{AckWait: 10 * time.Minute, LeaseTTL: 30 * time.Second, ScriptedDelay: 3 * time.Millisecond, Concurrency: 16}
	cfg.WorkerID = "leaving"
	a := startMember(t, srv.URL, cfg)
	cfg.WorkerID = "staying"
	startMember(t, srv.URL, cfg)
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	want := map[string][]string{}
	var msgs []outMsg
	for i := range 10 {
		for s := range 40 {
			key := fmt.Sprintf("stop:%d", s)
			text := fmt.Sprintf("turn %d of %d", i, s)
			msgs = append(msgs, outMsg{key, text, fmt.Sprintf("g-%d-%d", s, i)})
			want[key] = append(want[key], text)
		}
	}
	publishAll(t, js, msgs)
	var held []string
	waitUntil(t, time.Minute, "the leaving worker holding a lane", func(ctx context.Context) bool {
		lanes, err := kvstore.Bind(ctx, js, "")
		if err != nil {
			return false // a loaded server may outwait the client's 5 s
		}
		for s := range 40 {
			tok, _ := events.KeyToken(fmt.Sprintf("stop:%d", s))
			if h, ok, _ := lanes.Holder(ctx, tok); ok && h.Worker == "leaving" {
				held = append(held, tok)
			}
		}
		return len(held) > 0
	})
	stopAt := time.Now()
	a.stop()
	t.Logf("stop took %v with %d lanes held", time.Since(stopAt).Round(time.Millisecond), len(held))
	waitDrained(t, js, 5*time.Minute)
	t.Logf("all lanes drained %v after the stop began", time.Since(stopAt).Round(time.Millisecond))
	c, _ := lanefleet.New(nc)
	checkTranscripts(t, c, want)
	if st := a.m.Worker.Stats(); st.Turns.Load() == 0 {
		t.Fatal("the leaving worker never ran a turn; the test proves nothing")
	}
}

// TestClusterNodeLoss: a 3-node JetStream cluster with R3 streams and
// buckets; one node is shut down under load and the fleet keeps going.
func TestClusterNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	t.Parallel()
	cl := natstest.StartCluster(t, 3)
	for i := range 2 {
		startMember(t, cl.URL(), fleet.Config{WorkerID: fmt.Sprintf("cw%d", i), Replicas: 3, Concurrency: 16,
			AckWait: 10 * time.Second, LeaseTTL: 10 * time.Second})
	}
	nc := natstest.Connect(t, cl.URL())
	js, _ := jetstream.New(nc, jetstream.WithDefaultTimeout(10*time.Second))
	want := map[string][]string{}
	var first, second []outMsg
	for i := range 6 {
		for s := range 60 {
			key := fmt.Sprintf("cluster:%d", s)
			text := fmt.Sprintf("c %d %d", s, i)
			m := outMsg{key, text, fmt.Sprintf("k-%d-%d", s, i)}
			if i < 3 {
				first = append(first, m)
			} else {
				second = append(second, m)
			}
			want[key] = append(want[key], text)
		}
	}
	publishOrdered(t, js, first)
	cl.Stop(2)
	t.Log("node n3 shut down")
	publishOrdered(t, js, second)
	drain := time.Now()
	waitDrained(t, js, 5*time.Minute) // detects a hang only: the whole test took 203 s at a load of 18
	t.Logf("drained %v after the last publish", time.Since(drain).Round(time.Millisecond))
	c, _ := lanefleet.New(nc)
	checkTranscripts(t, c, want)
}
