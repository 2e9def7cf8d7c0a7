package lanes

import (
	"testing"
	"time"
)

// waitTimeout bounds every wait of the package's tests: it only detects a
// hang, so that a regression fails rather than stalling the package until
// go test's own timeout.
const waitTimeout = time.Minute

// waitFor polls cond until it holds, failing t with what when waitTimeout
// goes by first. It is the one poll loop of the package's tests: a test
// that has a signal to wait on (a channel, an event) waits on that instead.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("waiting for %s: %v went by", what, waitTimeout)
		case <-tick.C:
		}
	}
}

// waitClosed waits for ch to be closed (or to give a value), failing t
// with what when waitTimeout goes by first.
func waitClosed(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("waiting for %s: %v went by", what, waitTimeout)
	}
}
