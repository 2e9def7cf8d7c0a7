package integration

import (
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// takeoverArgs are the fault workers' flags for the fast-takeover cases:
// AckWait and the lease TTL a minute, so only fast takeover can resume a
// dead worker's lanes within the cases' 30 s deadlines.
var takeoverArgs = []string{"--ack-wait", "60s", "--lease-ttl", "60s", "--liveness-every", "250ms", "--liveness-ttl", "2s",
	"--scripted-delay", "100ms", "--concurrency", "32"}

// TestFaultKilledWorkerTakenOverFast: a worker process SIGKILLed mid-run
// has its lanes resumed by the survivor within 30 s, half AckWait and the
// lease TTL (before fast takeover they waited out AckWait, and this case
// failed): the survivor finds its connection gone, declares it dead and
// takes its leases over. Every run ends exactly once, in order.
func TestFaultKilledWorkerTakenOverFast(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite")
	}
	t.Parallel()
	cl := natstest.StartProcCluster(t, 1)
	// As in TestFaultPausedWorkerFencedOut: the victim takes the lanes
	// alone, its turns slow, and the survivor joins before the kill.
	victim := startWorkerProc(t, cl.URL(), "victim", append(takeoverArgs, "--scripted-delay", "1s")...)
	nc, js := connectProcs(t, cl)
	waitForFleet(t, js)
	leases := watchLeases(t, js)
	fin := watchRunFinals(t, cl.URL())
	msgs, _, want := faultLoad("fast", 15, 3)
	runs := sendOrdered(t, js, msgs)
	leases.waitHeld(t, "victim", 3, time.Minute)
	survivor := startWorkerProc(t, cl.URL(), "survivor", append(takeoverArgs, "--log-level", "info")...)
	survivor.waitLog(t, "worker started", time.Minute)
	held := leases.waitHeld(t, "victim", 3, time.Minute)
	victim.kill()
	killed := time.Now()
	t.Logf("SIGKILLed the worker holding %d lanes mid-run", len(held))
	fin.waitAll(t, js, runs, 30*time.Second)
	t.Logf("all runs ended %v after the kill", time.Since(killed).Round(time.Millisecond))
	if len(survivor.logLines("took over a dead worker's lanes")) == 0 {
		t.Error("the survivor never said it took the dead worker's lanes over")
	}
	audit(t, js, runs)
	c, _ := lanefleet.New(nc)
	checkTranscripts(t, c, want)
}

// TestFaultPausedWorkerFencedOut: a worker process SIGSTOPped mid-run keeps
// its connection, so it is found dead only when its life lapses (2 s);
// the survivor then takes its lanes over and ends every run. Woken with
// SIGCONT, the paused worker finds itself declared dead and stops its
// turns: no event of it is stored after the survivor's, no run ends twice,
// and every transcript holds each turn once.
func TestFaultPausedWorkerFencedOut(t *testing.T) {
	if testing.Short() {
		t.Skip("fault suite")
	}
	t.Parallel()
	cl := natstest.StartProcCluster(t, 1)
	// The paused worker runs alone while the load is sent, so it takes the
	// lanes however busy the machine is (with the survivor pulling too, a
	// loaded machine once gave the survivor every lane), and its turns are
	// slow (a second a delta, eleven a turn), so it is still mid-run when
	// the survivor has started. The survivor's own turns keep their pace.
	victim := startWorkerProc(t, cl.URL(), "paused", append(takeoverArgs, "--log-level", "info", "--scripted-delay", "1s")...)
	nc, js := connectProcs(t, cl)
	waitForFleet(t, js)
	leases := watchLeases(t, js)
	fin := watchRunFinals(t, cl.URL())
	msgs, _, want := faultLoad("pause", 15, 3)
	runs := sendOrdered(t, js, msgs)
	leases.waitHeld(t, "paused", 3, time.Minute)
	survivor := startWorkerProc(t, cl.URL(), "survivor", append(takeoverArgs, "--log-level", "info")...)
	survivor.waitLog(t, "worker started", time.Minute)
	held := leases.waitHeld(t, "paused", 3, time.Minute)
	victim.signal(syscall.SIGSTOP)
	t.Logf("SIGSTOPped the worker holding %d lanes mid-run", len(held))
	fin.waitAll(t, js, runs, 30*time.Second)
	victim.signal(syscall.SIGCONT)
	victim.waitLog(t, "this worker was declared dead", time.Minute)
	audit(t, js, runs)
	c, _ := lanefleet.New(nc)
	checkTranscripts(t, c, want)
}
