package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/schedstore"
	"github.com/lanefleet/lanefleet/schedule"
)

// chaosEvery is the period of the soak's schedule.
const chaosEvery = 2 * time.Second

// chaosSchedule is an @every 2s schedule (overlap allow, catch-up one)
// firing into one session through the fault soak. Its record keeps only
// the newest firings, so every revision of it is watched and each
// firing kept as it was first recorded.
type chaosSchedule struct {
	c       *lanefleet.Client
	id      string
	session string

	mu        sync.Mutex
	firings   map[int64]schedule.Firing // by due time
	conflicts []string                  // a due time recorded twice, differently
	stop      func()
}

func startChaosSchedule(t *testing.T, c *lanefleet.Client, js jetstream.JetStream) *chaosSchedule {
	t.Helper()
	s := &chaosSchedule{c: c, session: "chaos:sched", firings: map[int64]schedule.Firing{}}
	var sc *schedule.Schedule
	var err error
	for deadline := time.Now().Add(time.Minute); ; {
		sc, err = c.AddSchedule(t.Context(), lanefleet.NewSchedule{Session: s.session, Every: chaosEvery,
			Overlap: schedule.OverlapAllow, Message: events.Inbound{Text: "tick"}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("add the soak's schedule: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the workers make the bucket at start
	}
	s.id = sc.ID
	kv, err := js.KeyValue(t.Context(), schedstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := kv.Watch(ctx, sc.ID)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			rec, err := schedule.Decode(e.Value())
			if err != nil {
				continue
			}
			s.note(rec.History)
		}
	}()
	s.stop = func() { _ = w.Stop(); cancel(); <-done }
	t.Cleanup(s.stop)
	return s
}

// note keeps each firing of hist as first seen, and a conflict when a due
// time comes back with another outcome or run.
func (s *chaosSchedule) note(hist []schedule.Firing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range hist {
		old, ok := s.firings[f.DueMs]
		switch {
		case !ok:
			s.firings[f.DueMs] = f
		case old.Outcome != f.Outcome || old.RunID != f.RunID || old.Count != f.Count:
			s.conflicts = append(s.conflicts, fmt.Sprintf("due %d recorded as %s %s and as %s %s", f.DueMs, old.Outcome, old.RunID, f.Outcome, f.RunID))
		}
	}
}

// faultWindow is when a fault struck and when its process was back.
type faultWindow struct{ from, to time.Time }

// schedAudit is what the soak's schedule did.
type schedAudit struct {
	dues, fired, missed, failed, skipped int
	gaps, repeats, turns                 int
	lateOut, lateIn                      []time.Duration // fired, outside and inside fault windows
	problems                             []string
}

func (a schedAudit) bad() bool { return len(a.problems) > 0 }

func (a schedAudit) String() string {
	return fmt.Sprintf("schedule @every %v: %d due times (%d fired, %d missed and caught up as one, %d refused by the full lane, %d skipped), gaps %d, repeats %d, session turns %d; lateness p50/p99 %v/%v outside fault windows (%d), %v/%v inside (%d)",
		chaosEvery, a.dues, a.fired, a.missed, a.failed, a.skipped, a.gaps, a.repeats, a.turns,
		pct(a.lateOut, 50), pct(a.lateOut, 99), len(a.lateOut), pct(a.lateIn, 50), pct(a.lateIn, 99), len(a.lateIn))
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// finish pauses the schedule and returns its fired runs (for the run
// audit) once the fleet has drained. The audit: every due time from the
// first to the last recorded exactly once (fired, or missed and caught up
// as the catch-up policy says), never two outcomes for one due time, each
// fired run a run of its own, and the session ran exactly the fired
// turns.
func (s *chaosSchedule) finish(t *testing.T, js jetstream.JetStream, windows []faultWindow) ([]runRef, schedAudit) {
	t.Helper()
	var sc *schedule.Schedule
	var err error
	for try := 0; ; try++ {
		if sc, err = s.c.PauseSchedule(t.Context(), s.id); err == nil || try >= 10 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("pause the soak's schedule: %v", err)
	}
	s.note(sc.History)
	waitDrained(t, js, 5*time.Minute)
	s.stop()

	s.mu.Lock()
	defer s.mu.Unlock()
	var a schedAudit
	a.problems = append(a.problems, s.conflicts...)
	covered := map[int64]int{}
	var runs []runRef
	seenRun := map[string]bool{}
	step := chaosEvery.Milliseconds()
	for _, f := range s.firings {
		n := max(f.Count, 1)
		for i := range n {
			covered[f.DueMs-int64(i)*step]++
		}
		switch f.Outcome {
		case schedule.Fired:
			a.fired++
			if seenRun[f.RunID] {
				a.problems = append(a.problems, "run "+f.RunID+" recorded for two due times")
			}
			seenRun[f.RunID] = true
			runs = append(runs, runRef{session: s.session, run: f.RunID, text: "tick"})
			late := time.Duration(f.HandledMs-f.DueMs) * time.Millisecond
			due := time.UnixMilli(f.DueMs)
			in := false
			for _, w := range windows {
				if !due.Before(w.from) && !due.After(w.to.Add(5*time.Second)) {
					in = true
				}
			}
			if in {
				a.lateIn = append(a.lateIn, late)
			} else {
				a.lateOut = append(a.lateOut, late)
			}
		case schedule.Missed:
			a.missed += n
		case schedule.Failed:
			// A lane at its per-lane cap refuses the firing, which is
			// recorded as failed (docs/schedules.md): the lane's
			// backpressure, when its owner was stopped past AckWait and
			// overlap allow kept sending. Any other failure is a defect.
			a.failed++
			if !strings.Contains(f.Error, "maximum messages per subject exceeded") {
				a.problems = append(a.problems, fmt.Sprintf("due %d failed: %s", f.DueMs, f.Error))
			}
		default:
			a.skipped += n
			a.problems = append(a.problems, fmt.Sprintf("due %d %s under overlap allow", f.DueMs, f.Outcome))
		}
	}
	dues := make([]int64, 0, len(covered))
	for d, n := range covered {
		dues = append(dues, d)
		if n > 1 {
			a.repeats++
			a.problems = append(a.problems, fmt.Sprintf("due %d recorded %d times", d, n))
		}
	}
	slices.Sort(dues)
	a.dues = len(dues)
	for i := 1; i < len(dues); i++ {
		if gap := dues[i] - dues[i-1]; gap != step {
			a.gaps++
			a.problems = append(a.problems, fmt.Sprintf("due times %d and %d are %d ms apart", dues[i-1], dues[i], gap))
		}
	}
	a.turns = len(userTexts(t, s.c, s.session))
	if a.turns != a.fired {
		a.problems = append(a.problems, fmt.Sprintf("the session ran %d turns; the schedule fired %d times", a.turns, a.fired))
	}
	if a.dues == 0 {
		a.problems = append(a.problems, "the schedule never fired")
	}
	return runs, a
}
