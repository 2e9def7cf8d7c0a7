// Package lanestest holds the waits the lane's tests share (lanes and its
// internal packages): one poll loop, bounded by one timeout that only
// detects a hang. A test that has a signal to wait on (a channel, an event)
// waits on that instead.
package lanestest

import (
	"testing"
	"time"
)

// Timeout bounds every wait: a regression fails rather than stalling the
// package until go test's own timeout.
const Timeout = time.Minute

// WaitFor polls cond until it holds, failing t with what when Timeout goes
// by first.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("waiting for %s: %v went by", what, Timeout)
		case <-tick.C:
		}
	}
}

// WaitClosed waits for ch to be closed (or to give a value), failing t
// with what when Timeout goes by first.
func WaitClosed(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(Timeout):
		t.Fatalf("waiting for %s: %v went by", what, Timeout)
	}
}
