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
	kv, err := js.KeyValue(t.Context(), kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(t.Context(), "*.tx.*", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
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
	leader, err := cl.StreamLeader(t.Context(), js, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
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

// TestFaultPausedWorker: a worker process holding lanes mid-run is
// SIGSTOPped past AckWait. Its lanes resume on the other worker while it is
// still stopped (its open pull requests expire before its triggers come
// back), and after SIGCONT it publishes nothing the stream keeps: no event
// of its old attempts after the new owner's first, exactly one final per
// run. A core subscriber sees at most the one event that found out it was
// fenced.
func TestFaultPausedWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite")
	}
	t.Parallel()
	cl := natstest.StartProcCluster(t, 3)
	victim := startWorkerProc(t, cl.URL(), "paused", "--replicas", "3", "--scripted-delay", "40ms", "--concurrency", "32")
	nc, js := connectProcs(t, cl)
	waitForFleet(t, js)
	fin := watchRunFinals(t, cl.URL())
	seen := watchStale(t, cl.URL())
	msgs, keys, want := faultLoad("pause", 20, 3)
	runs := sendOrdered(t, js, msgs)
	held := heldBy(t, js, "paused", keys, len(keys)/2, time.Minute)

	victim.signal(syscall.SIGSTOP)
	stopped := time.Now()
	t.Logf("SIGSTOPped the worker holding %d lanes", held)
	startWorkerProc(t, cl.URL(), "alive", "--replicas", "3", "--scripted-delay", "5ms", "--concurrency", "32")
	// Every run ends while the victim is still stopped. The deadline is a
	// hang detector, far above AckWait (2s): a redelivery caught by the
	// stopped worker's pull request (30s by default) would miss it.
	fin.waitAll(t, js, runs, 25*time.Second)
	t.Logf("all runs ended %v after SIGSTOP, the stopped worker still stopped (AckWait 2s)", time.Since(stopped).Round(time.Millisecond))

	victim.signal(syscall.SIGCONT)
	// The woken worker finds its lanes lost; a second round runs on both.
	more, _, want2 := faultLoad("pause", 20, 4)
	runs2 := sendOrdered(t, js, more[len(msgs):])
	fin.waitAll(t, js, runs2, time.Minute)
	if lost := victim.logLines("lease lost", "fenced"); len(lost) == 0 {
		t.Log("the woken worker logged no lost lease (it may have had nothing left to do)")
	}
	audit(t, js, append(runs, runs2...))
	most, total := seen.worst()
	t.Logf("a core subscriber saw %d refused events of older attempts (at most %d in one run)", total, most)
	if most > 1 {
		t.Fatalf("a run showed %d events of an older attempt to core subscribers after a newer one began", most)
	}
	c, _ := lanefleet.New(nc)
	checkTranscripts(t, c, want2)
	_ = want
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
