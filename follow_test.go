package lanefleet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
)

// TestFollowerOrder: the rules that turn live events (a subscription that
// may miss some or see a zombie's) and stored events (catch-ups, the truth)
// into each event once, in order.
func TestFollowerOrder(t *testing.T) {
	t.Parallel()
	// An input is "<seq>[a<attempt>][F][s]": F a final event, s stored
	// (from a catch-up) rather than live.
	tests := []struct {
		name, in, want string
	}{
		{"in order", "1 2 3", "1 2 3"},
		{"live duplicates dropped", "1 1 2 1", "1 2"},
		{"catch-up overlaps live", "1 2 1s 2s 3s 4", "1 2 3 4"},
		// 3 waits behind the gap until a catch-up brings 2.
		{"live gap filled by the store", "1 3 4 2s", "1 2 3 4"},
		// The store never got 2: a stored event past the gap skips it.
		{"stored gap skipped", "1s 3s 4", "1 3 4"},
		{"a final past a live gap waits", "1 3F 2s", "1 2 3F"},
		// A worker that lost the lane publishes seq 5 of attempt 1 after the
		// next owner's attempt 2 began: skipped, and seq 5 stays open for
		// attempt 2's own event.
		{"zombie after a newer attempt", "1a1 2a1 3a2 4a2 5a1 5a2 6a2F", "1a1 2a1 3a2 4a2 5a2 6a2F"},
		{"the final ends the run", "1 2F 3", "1 2F"},
		// A final whose seq was taken by another event still ends the run.
		{"final with a reused seq", "1 2 2F", "1 2 2F"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &follower{r: &Run{ID: "1"}, next: 1, ahead: map[uint64]*events.Event{}, idle: idleMin,
				gap: backoff{min: gapMin, max: gapMax}}
			var got []string
			yield := func(ev *events.Event, err error) bool {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, label(ev))
				return true
			}
			for _, in := range strings.Fields(tt.in) {
				ev, stored := parseLabel(t, in)
				if !f.offer(ev, stored, yield) {
					break
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("yielded %q, want %q", strings.Join(got, " "), tt.want)
			}
		})
	}
}

// TestFollowerSchedulesCatchUp: an event in order pushes the next look at
// the store to a silence of idleMin; a live gap asks the store at once.
func TestFollowerSchedulesCatchUp(t *testing.T) {
	t.Parallel()
	f := &follower{r: &Run{ID: "1"}, next: 1, ahead: map[uint64]*events.Event{}, idle: 8 * idleMin,
		gap: backoff{min: gapMin, max: gapMax}, due: time.Now()}
	yield := func(*events.Event, error) bool { return true }
	before := time.Now()
	f.offer(&events.Event{Seq: 1, Stream: events.StreamAssistant}, false, yield)
	if f.due.Before(before.Add(idleMin)) || f.due.After(time.Now().Add(idleMin)) {
		t.Fatalf("after an event in order the next catch-up is in %v, want %v", time.Until(f.due), idleMin)
	}
	f.offer(&events.Event{Seq: 3, Stream: events.StreamAssistant}, false, yield)
	if f.due.After(time.Now()) {
		t.Fatalf("a gap did not schedule a catch-up at once: %v", time.Until(f.due))
	}
}

func label(ev *events.Event) string {
	s := fmt.Sprint(ev.Seq)
	if ev.Attempt > 0 {
		s += fmt.Sprintf("a%d", ev.Attempt)
	}
	if ev.Terminal() {
		s += "F"
	}
	return s
}

func parseLabel(t *testing.T, s string) (*events.Event, bool) {
	t.Helper()
	ev := &events.Event{Stream: events.StreamAssistant}
	stored := strings.HasSuffix(s, "s")
	s = strings.TrimSuffix(s, "s")
	if strings.HasSuffix(s, "F") {
		ev.Stream = events.StreamFinal
		s = strings.TrimSuffix(s, "F")
	}
	seq, attempt, _ := strings.Cut(s, "a")
	if _, err := fmt.Sscan(seq, &ev.Seq); err != nil {
		t.Fatal(err)
	}
	if attempt != "" {
		if _, err := fmt.Sscan(attempt, &ev.Attempt); err != nil {
			t.Fatal(err)
		}
	}
	return ev, stored
}
