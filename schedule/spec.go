package schedule

import (
	"errors"
	"fmt"
	"time"
	// The IANA zone database, built in: a schedule's zone must resolve the
	// same on every worker, also on a machine or image without
	// /usr/share/zoneinfo (a distroless container, Windows). About 450 KB.
	_ "time/tzdata"
)

// ErrBadSpec means a schedule's timing (cron, interval, time, zone) is
// invalid; the error says what.
var ErrBadSpec = errors.New("schedule: bad timing")

// Bounds of a Spec.
const (
	// MinEvery is the shortest interval of an @every schedule.
	MinEvery = time.Second
	// MaxEvery is the longest interval of an @every schedule.
	MaxEvery = 366 * 24 * time.Hour
	// MaxZoneLen bounds a time zone name before it is looked up.
	MaxZoneLen = 64
)

// Spec says when a schedule fires: exactly one of a cron expression (with
// an optional IANA time zone, default UTC), an interval (@every, counted
// from Anchor) or a single time (@at).
type Spec struct {
	Cron string `json:"cron,omitempty"`
	Zone string `json:"zone,omitempty"`
	// EveryMs is the interval of an @every schedule, in milliseconds;
	// its firings are at Anchor + k×interval, k ≥ 1.
	EveryMs int64 `json:"everyMs,omitempty"`
	// AnchorMs is when an @every schedule's count starts (Unix ms): its
	// creation time.
	AnchorMs int64 `json:"anchorMs,omitempty"`
	// AtMs is the time of a one-shot @at schedule (Unix ms).
	AtMs int64 `json:"atMs,omitempty"`
}

// String renders the spec as the command line writes it.
func (s Spec) String() string {
	switch {
	case s.Cron != "" && s.Zone != "":
		return fmt.Sprintf("cron %q in %s", s.Cron, s.Zone)
	case s.Cron != "":
		return fmt.Sprintf("cron %q (UTC)", s.Cron)
	case s.EveryMs > 0:
		return "@every " + (time.Duration(s.EveryMs) * time.Millisecond).String()
	default:
		return "@at " + time.UnixMilli(s.AtMs).UTC().Format(time.RFC3339)
	}
}

// Timer computes a Spec's firing times.
type Timer struct {
	spec Spec
	cron *Cron
}

// Compile validates the spec and returns its timer. Errors wrap
// ErrBadSpec (and ErrBadCron for the expression).
func (s Spec) Compile() (*Timer, error) {
	n := 0
	for _, set := range []bool{s.Cron != "", s.EveryMs != 0, s.AtMs != 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("%w: give exactly one of a cron expression, an interval (@every) or a time (@at)", ErrBadSpec)
	}
	if s.Zone != "" && s.Cron == "" {
		return nil, fmt.Errorf("%w: a time zone applies to a cron expression only", ErrBadSpec)
	}
	t := &Timer{spec: s}
	switch {
	case s.Cron != "":
		loc, err := LoadZone(s.Zone)
		if err != nil {
			return nil, err
		}
		if t.cron, err = ParseCron(s.Cron, loc); err != nil {
			return nil, also{err, ErrBadSpec}
		}
	case s.EveryMs != 0:
		d := time.Duration(s.EveryMs) * time.Millisecond
		if s.EveryMs < 0 || d < MinEvery || d > MaxEvery {
			return nil, fmt.Errorf("%w: interval %v is not between %v and %v", ErrBadSpec, d, MinEvery, MaxEvery)
		}
		if s.AnchorMs <= 0 {
			return nil, fmt.Errorf("%w: an interval needs its start time", ErrBadSpec)
		}
	default:
		if s.AtMs < 0 {
			return nil, fmt.Errorf("%w: time before 1970", ErrBadSpec)
		}
	}
	return t, nil
}

// LoadZone returns the named IANA time zone ("" is UTC). Errors wrap
// ErrBadSpec.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if len(name) > MaxZoneLen {
		return nil, fmt.Errorf("%w: time zone name of %d bytes (at most %d)", ErrBadSpec, len(name), MaxZoneLen)
	}
	if name == "Local" {
		return nil, fmt.Errorf("%w: time zone %q depends on the worker's machine; name an IANA zone such as Europe/Paris", ErrBadSpec, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: time zone %q: %w", ErrBadSpec, name, err)
	}
	return loc, nil
}

// Next returns the first firing strictly after t, and false when there is
// none (a past @at, a cron expression that matches no date).
func (tm *Timer) Next(t time.Time) (time.Time, bool) {
	s := tm.spec
	switch {
	case tm.cron != nil:
		return tm.cron.Next(t)
	case s.EveryMs > 0:
		anchor := time.UnixMilli(s.AnchorMs)
		every := time.Duration(s.EveryMs) * time.Millisecond
		k := max(t.Sub(anchor)/every+1, 1) // the first firing is one interval after the anchor
		return anchor.Add(k * every), true
	default:
		at := time.UnixMilli(s.AtMs)
		return at, at.After(t)
	}
}

// Period returns the time from a firing at t to the next one, or 0 when
// there is none.
func (tm *Timer) Period(t time.Time) time.Duration {
	n, ok := tm.Next(t)
	if !ok {
		return 0
	}
	return n.Sub(t)
}

// also is an error that says err and matches sentinel too (errors.Is),
// without repeating the sentinel's text.
type also struct{ err, sentinel error }

func (e also) Error() string   { return e.err.Error() }
func (e also) Unwrap() []error { return []error{e.err, e.sentinel} }
