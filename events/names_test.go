package events

import (
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/deptest"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// TestQueueNamesMatchQueue pins the wire schema's own list of queue mode
// and drop policy names to lanes/queue's parser: every name events accepts
// means the same there, and every mode and policy there is accepted here.
func TestQueueNamesMatchQueue(t *testing.T) {
	t.Parallel()
	variants := func(s string) []string { return []string{s, strings.ToUpper(s), " " + s + "\t"} }
	for name, canon := range modeNames {
		for _, v := range variants(name) {
			m, ok := queue.ParseMode(v)
			got, gotOK := modeName(v)
			if !ok || !gotOK || string(m) != got || got != canon {
				t.Errorf("mode %q: events says %q %v, queue says %q %v", v, got, gotOK, m, ok)
			}
		}
	}
	for _, m := range []queue.Mode{queue.ModeSteer, queue.ModeFollowup, queue.ModeCollect, queue.ModeSteerBacklog,
		queue.ModeInterrupt, queue.ModeReject, queue.ModeRollback} {
		if got, ok := modeName(string(m)); !ok || got != string(m) {
			t.Errorf("queue mode %q: events says %q %v", m, got, ok)
		}
	}
	for name, canon := range dropNames {
		for _, v := range variants(name) {
			p, ok := queue.ParseDropPolicy(v)
			got, gotOK := dropName(v)
			if !ok || !gotOK || string(p) != got || got != canon {
				t.Errorf("drop %q: events says %q %v, queue says %q %v", v, got, gotOK, p, ok)
			}
		}
	}
	for _, p := range []queue.DropPolicy{queue.DropOld, queue.DropNew, queue.DropSummarize} {
		if got, ok := dropName(string(p)); !ok || got != string(p) {
			t.Errorf("queue drop policy %q: events says %q %v", p, got, ok)
		}
	}
	for _, bad := range []string{"", "sideways", "steer backlog", "all"} {
		_, q1 := queue.ParseMode(bad)
		_, e1 := modeName(bad)
		_, q2 := queue.ParseDropPolicy(bad)
		_, e2 := dropName(bad)
		if q1 || e1 || q2 || e2 {
			t.Errorf("%q accepted: queue mode %v, events mode %v, queue drop %v, events drop %v", bad, q1, e1, q2, e2)
		}
	}
}

// TestImports keeps the wire schema a leaf: no NATS, nothing of the lane
// runtime (lanes/queue included).
func TestImports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	deptest.NoImports(t, deptest.Contains("nats-io"), deptest.Prefix("github.com/lanefleet/lanefleet/lanes"))
}

// TestDebounceBoundMatchesQueue pins the wire schema's debounce bound to
// the one lanes/queue applies to stored settings.
func TestDebounceBoundMatchesQueue(t *testing.T) {
	t.Parallel()
	if got := time.Duration(MaxDebounceMs) * time.Millisecond; got != queue.DebounceMax {
		t.Fatalf("events bounds a debounce at %v, lanes/queue at %v", got, queue.DebounceMax)
	}
}
