package governance

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// WindowKind is how a budget's window runs.
type WindowKind string

// Window kinds.
const (
	WindowTotal   WindowKind = "total"   // never resets by itself
	WindowDay     WindowKind = "day"     // each UTC day
	WindowMonth   WindowKind = "month"   // each UTC calendar month
	WindowRolling WindowKind = "rolling" // the last Window.Rolling, in RollingSlots slots
)

// Rolling windows' bounds, and the slots one is kept in: what a rolling
// window used is the sum of the slots that began within it, so it forgets
// usage a slot (a sixtieth of the window) at a time.
const (
	RollingMin   = time.Minute
	RollingMax   = 366 * 24 * time.Hour
	RollingSlots = 60
)

// ErrBadWindow is returned for a window ParseWindow does not accept.
var ErrBadWindow = errors.New("governance: bad window")

// Window is a budget's window. The zero value is WindowTotal.
type Window struct {
	Kind WindowKind `json:"kind,omitempty"`
	// Rolling is the length of a rolling window.
	Rolling time.Duration `json:"rolling,omitempty"`
}

// ParseWindow reads "total", "day", "month" or "rolling=DUR" (a Go
// duration, at least a minute and at most 366 days; "d" counts days).
func ParseWindow(s string) (Window, error) {
	switch s {
	case "", string(WindowTotal):
		return Window{Kind: WindowTotal}, nil
	case string(WindowDay):
		return Window{Kind: WindowDay}, nil
	case string(WindowMonth):
		return Window{Kind: WindowMonth}, nil
	}
	v, ok := strings.CutPrefix(s, string(WindowRolling)+"=")
	if !ok || len(v) > 32 {
		return Window{}, fmt.Errorf("%w: %.40q (total, day, month or rolling=DUR)", ErrBadWindow, s)
	}
	d, err := parseDuration(v)
	if err != nil || d < RollingMin || d > RollingMax {
		return Window{}, fmt.Errorf("%w: %.40q: a rolling window is a duration from 1m to 366d", ErrBadWindow, s)
	}
	return Window{Kind: WindowRolling, Rolling: d}, nil
}

// parseDuration is time.ParseDuration with whole days ("7d"), at most
// RollingMax's (more would overflow: "213504d" wrapped to 26 minutes).
func parseDuration(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err != nil || fmt.Sprint(n) != days || n <= 0 || n > int(RollingMax/(24*time.Hour)) {
			return 0, ErrBadWindow
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

// String is the window as ParseWindow reads it.
func (w Window) String() string {
	switch w.Kind {
	case WindowRolling:
		if w.Rolling%(24*time.Hour) == 0 {
			return fmt.Sprintf("rolling=%dd", w.Rolling/(24*time.Hour))
		}
		return "rolling=" + w.Rolling.String()
	case "":
		return string(WindowTotal)
	}
	return string(w.Kind)
}

// valid reports what is wrong with w, for a stored value.
func (w Window) valid() error {
	switch w.Kind {
	case "", WindowTotal, WindowDay, WindowMonth:
		return nil
	case WindowRolling:
		if w.Rolling >= RollingMin && w.Rolling <= RollingMax {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrBadWindow, w)
}

// start is when the fixed window holding now began (unix ms): 0 for total,
// the UTC day's or month's start. A rolling window has no fixed start: its
// slot's start is returned (see slot).
func (w Window) start(now time.Time) int64 {
	u := now.UTC()
	switch w.Kind {
	case WindowDay:
		return time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC).UnixMilli()
	case WindowMonth:
		return time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	case WindowRolling:
		return w.slot(now)
	}
	return 0
}

// slot is the start (unix ms) of the rolling window's slot holding now.
func (w Window) slot(now time.Time) int64 {
	width := w.slotWidth()
	ms := now.UnixMilli()
	return ms - ms%width
}

// slotWidth is a rolling window's slot length in ms.
func (w Window) slotWidth() int64 { return max(w.Rolling.Milliseconds()/RollingSlots, 1) }
