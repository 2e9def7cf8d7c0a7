package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
)

// connectProcs connects a client to a process cluster, reconnecting forever.
func connectProcs(t *testing.T, c *natstest.ProcCluster) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := natstest.Connect(t, c.URL())
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// TestFaultEventLeaderKilledAfterCommits: on a 3-node cluster of nats-server
// processes (R3), the AGENT_EV stream leader is SIGKILLed while turns are
// committing. Each turn's final event is a promise its owner keeps: every
// run gets exactly one final, and the transcripts hold every turn once.
func TestFaultEventLeaderKilledAfterCommits(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite")
	}
	t.Parallel()
	cl := natstest.StartProcCluster(t, 3)
	for _, id := range []string{"ew1", "ew2"} {
		startWorkerProc(t, cl.URL(), id, "--replicas", "3", "--scripted-delay", "25ms", "--concurrency", "32")
	}
	nc, js := connectProcs(t, cl)
	waitForFleet(t, js)
	fin := watchRunFinals(t, cl.URL())
	msgs, _, want := faultLoad("evlead", 40, 1)

	// Watch turn records commit, and kill the event stream's leader once
	// the first ones have: the rest commit around the kill.
	var w jetstream.KeyWatcher
	waitUntil(t, time.Minute, "watch the lanes bucket", func(ctx context.Context) bool {
		kv, err := js.KeyValue(ctx, kvstore.DefaultBucket)
		if err == nil {
			w, err = kv.Watch(ctx, "*.tx.*", jetstream.UpdatesOnly())
		}
		return err == nil // a busy cluster may time out once
	})
	defer w.Stop()
	runs := sendOrdered(t, js, msgs)
	for committed := 0; committed < 5; {
		select {
		case e := <-w.Updates():
			if e != nil {
				committed++
			}
		case <-time.After(60 * time.Second):
			t.Fatal("no turn committed")
		}
	}
	var leader *natstest.Node
	waitUntil(t, time.Minute, "find the event stream's leader", func(ctx context.Context) bool {
		var err error
		leader, err = cl.StreamLeader(ctx, js, events.EventStream)
		return err == nil
	})
	leader.Kill()
	killed := time.Now()
	t.Logf("SIGKILLed %s, the %s leader, after 5 commits", leader.Name, events.EventStream)

	fin.waitAll(t, js, runs, 2*time.Minute)
	t.Logf("every run has its final event %v after the kill", time.Since(killed).Round(time.Millisecond))
	leader.Start()
	audit(t, js, runs)
	c, _ := lanefleet.New(nc)
	checkTranscripts(t, c, want)
}

// TestFaultPausedWorker: on a 3-node cluster of nats-server processes, a
// worker process holding lanes mid-run is SIGSTOPped past AckWait. Its
// lanes resume on the other worker while it is stopped, and it is woken
// while the new owner is still running those turns: the stream keeps no
// event of its old attempts after the new owner's first, and every run has
// exactly one final. A core subscriber on agent.ev.> (which also sees
// publishes the stream refuses) sees at most the one event with which a
// woken worker learns it was fenced.
func TestFaultPausedWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite")
	}
	t.Parallel()
	cl := natstest.StartProcCluster(t, 3)
	// 200 ms a turn: on a loaded box a worker took its lanes one by one
	// more slowly than 60 ms turns ended them, and never held 10 at once.
	slow := []string{"--replicas", "3", "--scripted-delay", "200ms", "--concurrency", "32"}
	victim := startWorkerProc(t, cl.URL(), "paused", slow...)
	nc, js := connectProcs(t, cl)
	waitForFleet(t, js)
	fin := watchRunFinals(t, cl.URL())
	seen := watchStale(t, cl.URL())
	msgs, keys, _ := faultLoad("pause", 20, 5) // long enough that the lanes are held together on a busy box
	runs := sendOrdered(t, js, msgs)
	held := heldBy(t, js, "paused", keys, len(keys)/2, 2*time.Minute)

	victim.signal(syscall.SIGSTOP)
	stopped := time.Now()
	t.Logf("SIGSTOPped the worker holding %d lanes mid-run", len(held))
	startWorkerProc(t, cl.URL(), "alive", slow...)
	// The stopped worker's lanes are taken over while it is stopped: each
	// is seen held by the other worker, or its cursor moves past where the
	// stopped worker left it (only the other worker can move it; on a busy
	// box it may take a lane, finish it and release it between two looks).
	// The deadline only detects a hang; it is far above AckWait (2s).
	// A lane whose last message the stopped worker committed, without its
	// final events, is taken over by publishing them: its cursor stays
	// and the other worker holds it only for a moment.
	left := cursors(t, js, held)
	owedFinals := map[string]int{}
	for s, c := range left {
		owedFinals[s] = fin.count(s, c)
	}
	taken := map[string]bool{}
	waitUntil(t, time.Minute, "the stopped worker's lanes taken over", func(context.Context) bool {
		for _, s := range holders(t, js, "alive", held) {
			taken[s] = true
		}
		for s, c := range cursors(t, js, held) {
			if was, ok := left[s]; ok && (c > was || fin.count(s, was) > owedFinals[s]) {
				taken[s] = true
			}
		}
		return len(taken) == len(held)
	})
	t.Logf("its %d lanes resumed on the other worker %v after SIGSTOP (AckWait 2s)", len(held), time.Since(stopped).Round(time.Millisecond))
	victim.signal(syscall.SIGCONT)

	fin.waitAll(t, js, runs, 3*time.Minute)
	// A second round runs on both workers.
	more, _, want := faultLoad("pause", 20, 6)
	runs2 := sendOrdered(t, js, more[len(msgs):])
	fin.waitAll(t, js, runs2, 3*time.Minute)
	t.Logf("the woken worker logged %d lost leases or fenced runs", len(victim.logLines("lease lost", "fenced")))
	audit(t, js, append(runs, runs2...))
	most, total := seen.worst()
	t.Logf("a core subscriber saw %d refused events of older attempts (at most %d in one run)", total, most)
	if most > 1 {
		t.Fatalf("a run showed %d events of an older attempt to core subscribers after a newer one began", most)
	}
	c, _ := lanefleet.New(nc)
	checkTranscripts(t, c, want)
}

// waitUntil polls cond every 20ms until it holds or timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond(t.Context()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
