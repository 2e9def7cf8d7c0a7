package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrBadCron means a cron expression does not parse; the error says which
// field and why.
var ErrBadCron = errors.New("schedule: bad cron expression")

// MaxCronLen bounds a cron expression's length before it is parsed.
const MaxCronLen = 256

// cronSearchYears bounds the search for a cron expression's next time: an
// expression that matches nothing within it (30 February) never fires.
const cronSearchYears = 5

// Cron is a parsed five-field cron expression (minute hour day-of-month
// month day-of-week) evaluated in a time zone. Each field is a set of
// allowed values, one bit per value.
//
// Fields take *, a value, a range a-b, a step */n or a-b/n, and lists of
// those separated by commas; months and weekdays also take their English
// three-letter names (JAN, MON), and weekday 7 is Sunday as 0 is. When
// both day-of-month and day-of-week are restricted (neither starts with
// *), a day matches either, as Vixie cron does. @yearly (@annually),
// @monthly, @weekly, @daily (@midnight) and @hourly stand for their usual
// expressions.
//
// Daylight saving time: each matching wall-clock time fires once. A wall
// time that occurs twice (the hour repeated when clocks go back) fires at
// its first occurrence; one that does not occur (skipped when clocks go
// forward) fires at the instant the gap ends (for 02:30 on a day that
// skips from 02:00 to 03:00, at 03:00), once however many of its times
// the gap swallowed.
type Cron struct {
	minute, hour, dom, month, dow uint64
	domStar, dowStar              bool
	loc                           *time.Location
	expr                          string
}

type cronField struct {
	name     string
	min, max uint
	names    map[string]uint
}

var (
	minuteField = cronField{name: "minute", min: 0, max: 59}
	hourField   = cronField{name: "hour", min: 0, max: 23}
	domField    = cronField{name: "day of month", min: 1, max: 31}
	monthField  = cronField{name: "month", min: 1, max: 12, names: map[string]uint{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}}
	// Day of week allows 7 (Sunday again), folded onto 0 after parsing.
	dowField = cronField{name: "day of week", min: 0, max: 7, names: map[string]uint{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}}
)

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// ParseCron parses a five-field cron expression (or a macro such as
// @daily) to be evaluated in loc (nil: UTC). Errors wrap ErrBadCron.
func ParseCron(expr string, loc *time.Location) (*Cron, error) {
	if len(expr) > MaxCronLen {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrBadCron, len(expr), MaxCronLen)
	}
	if loc == nil {
		loc = time.UTC
	}
	text := strings.TrimSpace(expr)
	if m, ok := cronMacros[strings.ToLower(text)]; ok {
		text = m
	}
	fields := strings.Fields(text)
	if len(fields) != 5 {
		return nil, fmt.Errorf("%w: %q has %d fields; want 5 (minute hour day-of-month month day-of-week) or a macro such as @daily", ErrBadCron, expr, len(fields))
	}
	c := &Cron{loc: loc, expr: text}
	var err error
	for i, f := range []struct {
		dst   *uint64
		field cronField
	}{{&c.minute, minuteField}, {&c.hour, hourField}, {&c.dom, domField}, {&c.month, monthField}, {&c.dow, dowField}} {
		if *f.dst, err = parseField(fields[i], f.field); err != nil {
			return nil, err
		}
	}
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar = strings.HasPrefix(fields[2], "*")
	c.dowStar = strings.HasPrefix(fields[4], "*")
	return c, nil
}

// String returns the expression as parsed (a macro expanded).
func (c *Cron) String() string { return c.expr }

func parseField(s string, f cronField) (uint64, error) {
	var bits uint64
	for part := range strings.SplitSeq(s, ",") {
		b, err := parseRange(part, f)
		if err != nil {
			return 0, err
		}
		bits |= b
	}
	return bits, nil
}

func parseRange(s string, f cronField) (uint64, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s field %q: %s", ErrBadCron, f.name, s, why)
	}
	rng, stepText, hasStep := strings.Cut(s, "/")
	lo, hi := f.min, f.max
	switch {
	case rng == "*":
	case rng == "":
		return 0, bad("empty")
	default:
		a, b, isRange := strings.Cut(rng, "-")
		var err error
		if lo, err = parseValue(a, f); err != nil {
			return 0, bad(err.Error())
		}
		hi = lo
		if isRange {
			if hi, err = parseValue(b, f); err != nil {
				return 0, bad(err.Error())
			}
			if hi < lo {
				return 0, bad("range ends before it starts")
			}
		} else if hasStep {
			hi = f.max // "5/15" means 5-max/15
		}
	}
	step := uint64(1)
	if hasStep {
		n, err := strconv.ParseUint(stepText, 10, 8)
		if err != nil || n == 0 || n > uint64(f.max-f.min+1) {
			return 0, bad(fmt.Sprintf("step %q is not 1-%d", stepText, f.max-f.min+1))
		}
		step = n
	}
	var bits uint64
	for v := uint64(lo); v <= uint64(hi); v += step {
		bits |= 1 << v
	}
	return bits, nil
}

func parseValue(s string, f cronField) (uint, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if uint(n) < f.min || uint(n) > f.max {
		return 0, fmt.Errorf("%d is outside %d-%d", n, f.min, f.max)
	}
	return uint(n), nil
}

// Next returns the first time strictly after t at which the expression
// fires, and false when it fires at none within five years (an impossible
// date such as 31 February).
func (c *Cron) Next(t time.Time) (time.Time, bool) {
	// The search walks wall-clock (civil) minutes, held as UTC times so
	// that no DST rule moves them, and maps each match to an instant.
	w := t.In(c.loc)
	civil := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), 0, 0, time.UTC)
	limit := civil.AddDate(cronSearchYears, 0, 0)
	for civil.Before(limit) {
		m, ok := c.nextCivil(civil, limit)
		if !ok {
			return time.Time{}, false
		}
		if at := resolve(m, c.loc); at.After(t) {
			return at, true
		}
		civil = m.Add(time.Minute)
	}
	return time.Time{}, false
}

// nextCivil returns the first matching civil minute at or after c.
func (c *Cron) nextCivil(t, limit time.Time) (time.Time, bool) {
	for t.Before(limit) {
		if c.month&(1<<uint(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if !c.dayMatches(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if c.hour&(1<<uint(t.Hour())) == 0 {
			t = t.Truncate(time.Hour).Add(time.Hour)
			continue
		}
		if c.minute&(1<<uint(t.Minute())) == 0 {
			t = t.Add(time.Minute)
			continue
		}
		return t, true
	}
	return time.Time{}, false
}

func (c *Cron) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<uint(t.Day())) != 0
	dow := c.dow&(1<<uint(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// resolve maps a civil time (its fields held in a UTC time) to the instant
// it names in loc: the earliest when the wall time occurs twice, the end
// of the gap when it does not occur.
func resolve(civil time.Time, loc *time.Location) time.Time {
	guess := time.Date(civil.Year(), civil.Month(), civil.Day(), civil.Hour(), civil.Minute(), 0, 0, loc)
	start, end := guess.ZoneBounds()
	var best time.Time
	try := func(ref time.Time) {
		_, off := ref.Zone()
		at := civil.Add(-time.Duration(off) * time.Second)
		if _, o := at.In(loc).Zone(); o != off {
			return // this offset is not in effect at that instant
		}
		if best.IsZero() || at.Before(best) {
			best = at
		}
	}
	try(guess)
	if !start.IsZero() {
		try(start.Add(-time.Nanosecond))
	}
	if !end.IsZero() {
		try(end)
	}
	if !best.IsZero() {
		return best.In(loc)
	}
	// A gap: the wall time was skipped. Go's guess lies on one side of
	// the transition; the gap ends at that transition.
	if wallAfter(guess.In(loc), civil) {
		return start.In(loc)
	}
	return end.In(loc)
}

// wallAfter reports whether t's wall clock reads later than civil.
func wallAfter(t, civil time.Time) bool {
	w := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
	return w.After(civil)
}
