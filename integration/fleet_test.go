package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestThreeWorkers500Sessions: 3 workers on separate connections, 500
// sessions × 10 messages, half interleaved round-robin and half in bursts of a
// session's 10 messages back to back. Every session's transcript must hold
// its 10 turns in publish order: nothing lost, nothing doubled.
func TestThreeWorkers500Sessions(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet load test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	for i := range 3 {
		startMember(t, srv.URL, fleet.Config{WorkerID: fmt.Sprintf("w%d", i), Concurrency: 32})
	}
	nc := natstest.Connect(t, srv.URL)
	fin := watchFinals(t, nc)
	js := newJS(t, nc)

	const sessions, perSession = 500, 10
	want := map[string][]string{}
	key := func(s int) string {
		if s%3 == 0 {
			return fmt.Sprintf("agent:main:dm:%d", s) // encoded token
		}
		return fmt.Sprintf("s%03d", s) // plain token
	}
	var msgs []outMsg
	// Bursts: sessions 0..249 get their 10 messages back to back.
	for s := 0; s < sessions/2; s++ {
		for i := range perSession {
			text := fmt.Sprintf("m%d-%d", s, i)
			msgs = append(msgs, outMsg{key(s), text, fmt.Sprintf("id-%d-%d", s, i)})
			want[key(s)] = append(want[key(s)], text)
		}
	}
	// Interleaved: sessions 250..499 round-robin.
	for i := range perSession {
		for s := sessions / 2; s < sessions; s++ {
			text := fmt.Sprintf("m%d-%d", s, i)
			msgs = append(msgs, outMsg{key(s), text, fmt.Sprintf("id-%d-%d", s, i)})
			want[key(s)] = append(want[key(s)], text)
		}
	}
	start := time.Now()
	publishAll(t, js, msgs)
	// Re-publishing with the same message ids within AGENT_IN's duplicate
	// window (2 minutes, counted from the first publish) adds no turns. It
	// is checked right away: on a loaded machine the load alone can take
	// longer than the window.
	publishAll(t, js, msgs[:50])
	// The bound only detects a hang: at load average 15 (other test
	// binaries on 2 cores) this test and the tree it was written on both
	// needed more than 5 minutes, with the race detector.
	waitDrained(t, js, 15*time.Minute)
	t.Logf("%d turns on 3 workers in %v (%.0f turns/s)", len(msgs), time.Since(start), float64(len(msgs))/time.Since(start).Seconds())

	c, err := lanefleet.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	checkTranscripts(t, c, want)
	if fin.dups != 0 {
		t.Errorf("%d runs published more than one final event", fin.dups)
	}
}
