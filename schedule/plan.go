package schedule

import (
	"fmt"
	"time"
)

// Overlap says what a firing does while the previous firing's run has not
// ended, as Temporal's overlap policies.
type Overlap string

// Overlap policies.
const (
	// OverlapSkip drops the firing while the previous firing's message
	// waits or its turn runs (the default).
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne lets one firing wait behind the previous
	// firing's running turn; a firing while one already waits is
	// dropped.
	OverlapBufferOne Overlap = "buffer-one"
	// OverlapAllow sends every firing (in one session they queue and run
	// in order; with a fresh session per firing they run side by side).
	OverlapAllow Overlap = "allow"
)

// CatchUp says what happens to firings whose time passed while no worker
// could fire them (the fleet was down, or stopped longer than a period).
type CatchUp string

// Catch-up policies.
const (
	// CatchUpOne fires once for all the missed times (the latest), unless
	// a firing on time is due anyway (the default).
	CatchUpOne CatchUp = "one"
	// CatchUpAll fires each missed time, oldest first, up to
	// MaxCatchUpAll; older ones are recorded as missed.
	CatchUpAll CatchUp = "all"
	// CatchUpNone fires none of them; they are recorded as missed.
	CatchUpNone CatchUp = "none"
)

// Plan bounds.
const (
	// MaxCatchUpAll bounds the firings one catch-up sends under CatchUpAll.
	MaxCatchUpAll = 100
	// OnTimeGrace is the longest a firing may be late and still count as
	// on time (shorter for schedules firing more often: a firing is late
	// once the next one is due).
	OnTimeGrace = time.Minute
	// maxWalk bounds the due times one plan enumerates (a minute cron
	// over about two years); a longer outage records the rest as one
	// missed entry.
	maxWalk = 1 << 20
)

// ParseOverlap reads an overlap policy ("" is OverlapSkip).
func ParseOverlap(s string) (Overlap, error) {
	switch o := Overlap(s); o {
	case "":
		return OverlapSkip, nil
	case OverlapSkip, OverlapBufferOne, OverlapAllow:
		return o, nil
	}
	return "", fmt.Errorf("%w: overlap %q (one of skip, buffer-one, allow)", ErrBadSpec, s)
}

// ParseCatchUp reads a catch-up policy ("" is CatchUpOne).
func ParseCatchUp(s string) (CatchUp, error) {
	switch c := CatchUp(s); c {
	case "":
		return CatchUpOne, nil
	case CatchUpOne, CatchUpAll, CatchUpNone:
		return c, nil
	}
	return "", fmt.Errorf("%w: catch-up %q (one of one, all, none)", ErrBadSpec, s)
}

// Outcome is what became of one due time.
type Outcome string

// Outcomes of a due time.
const (
	Fired   Outcome = "fired"   // a message was sent: its run id is recorded
	Skipped Outcome = "skipped" // the overlap policy dropped it
	Missed  Outcome = "missed"  // late, and the catch-up policy did not fire it
	Failed  Outcome = "failed"  // the session's lane refused the firing (full, too large)
)

// Previous is the state of the previous firing's run, as the adapter
// finds it when a firing is due.
type Previous int

// States of the previous firing's run.
const (
	PrevDone    Previous = iota // none, or its message was processed
	PrevRunning                 // its turn is running
	PrevWaiting                 // its message waits on its lane
)

// Decision is the plan for one due time.
type Decision struct {
	Due     time.Time
	Outcome Outcome
	// Count is how many due times a Missed decision stands for (at
	// least 1; more when an outage outran the walk: Due is then the
	// latest of them).
	Count int
}

// Plan decides what to do with the due times of a schedule after last
// (the latest due time already handled) up to now: which fire, which the
// overlap policy skips, which were missed and are not caught up. It
// returns the decisions in due-time order and the first due time after
// now (ok false: the schedule has no more).
//
// The latest due time is on time when now is within OnTimeGrace of it
// (the next is not due yet: it would be the latest); the others were
// missed. Catch-up applies to the
// missed ones: all fires each (at most MaxCatchUpAll, the newest), one
// fires the latest unless an on-time firing is due, none fires none.
// Overlap then applies to each firing in turn, starting from prev; a
// firing sent in this plan leaves the next one waiting behind it.
func Plan(tm *Timer, o Overlap, c CatchUp, last, now time.Time, prev Previous) (ds []Decision, next time.Time, ok bool) {
	var (
		due    []time.Time // the newest due times, at most MaxCatchUpAll+1
		older  int         // due times walked past and not kept
		oldest time.Time   // the latest of those
	)
	t := last
	for n := 0; ; n++ {
		d, more := tm.Next(t)
		if !more || d.After(now) {
			next, ok = d, more
			break
		}
		if n >= maxWalk {
			// Too long an outage to walk: go on from now.
			older++
			oldest = d
			next, ok = tm.Next(now)
			break
		}
		if len(due) == MaxCatchUpAll+1 {
			older++
			oldest = due[0]
			due = due[1:]
		}
		due = append(due, d)
		t = d
	}
	if older > 0 {
		ds = append(ds, Decision{Due: oldest, Outcome: Missed, Count: older})
	}
	if len(due) == 0 {
		return ds, next, ok
	}
	latest := due[len(due)-1]
	onTime := now.Sub(latest) <= OnTimeGrace // and the next is not due: it would be latest
	missed := due
	if onTime {
		missed = due[:len(due)-1]
	}
	fire := make([]bool, len(due))
	switch {
	case onTime:
		fire[len(due)-1] = true
		if c == CatchUpAll {
			for i := range missed {
				fire[i] = true
			}
		}
	case c == CatchUpAll:
		for i := range missed {
			fire[i] = true
		}
	case c == CatchUpOne:
		fire[len(due)-1] = true
	}
	if c == CatchUpAll && len(missed) > MaxCatchUpAll {
		fire[0] = false // the oldest of MaxCatchUpAll+1 kept
	}
	for i, d := range due {
		if !fire[i] {
			ds = append(ds, Decision{Due: d, Outcome: Missed, Count: 1})
			continue
		}
		if !mayFire(o, prev) {
			ds = append(ds, Decision{Due: d, Outcome: Skipped, Count: 1})
			continue
		}
		ds = append(ds, Decision{Due: d, Outcome: Fired, Count: 1})
		prev = PrevWaiting
	}
	return ds, next, ok
}

// mayFire is the overlap rule for one firing.
func mayFire(o Overlap, prev Previous) bool {
	switch o {
	case OverlapAllow:
		return true
	case OverlapBufferOne:
		return prev != PrevWaiting
	default:
		return prev == PrevDone
	}
}
