package schedule

import (
	"errors"
	"testing"
	"time"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err) // time/tzdata is built in: never missing
	}
	return loc
}

// TestCronNext pins Next against hand-computed wall-clock times, DST
// changes included.
func TestCronNext(t *testing.T) {
	t.Parallel()
	ny := mustZone(t, "America/New_York")
	paris := mustZone(t, "Europe/Paris")
	lordHowe := mustZone(t, "Australia/Lord_Howe") // a 30-minute DST shift
	at := func(loc *time.Location, s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name, expr string
		loc        *time.Location
		after      time.Time
		want       []time.Time // successive firings
	}{
		{"every minute", "* * * * *", time.UTC, at(time.UTC, "2026-01-01 10:00"),
			[]time.Time{at(time.UTC, "2026-01-01 10:01"), at(time.UTC, "2026-01-01 10:02")}},
		{"strictly after, mid-minute", "* * * * *", time.UTC, at(time.UTC, "2026-01-01 10:00").Add(30 * time.Second),
			[]time.Time{at(time.UTC, "2026-01-01 10:01")}},
		{"steps and lists", "*/20 9,17 * * *", time.UTC, at(time.UTC, "2026-01-01 09:30"),
			[]time.Time{at(time.UTC, "2026-01-01 09:40"), at(time.UTC, "2026-01-01 17:00")}},
		{"names", "0 8 * jan-feb MON", time.UTC, at(time.UTC, "2026-01-01 00:00"), // 2026-01-05 is a Monday
			[]time.Time{at(time.UTC, "2026-01-05 08:00"), at(time.UTC, "2026-01-12 08:00")}},
		{"weekday 7 is Sunday", "0 0 * * 7", time.UTC, at(time.UTC, "2026-01-01 00:00"),
			[]time.Time{at(time.UTC, "2026-01-04 00:00")}},
		{"day of month or day of week when both are set", "0 0 13 * 5", time.UTC, at(time.UTC, "2026-02-01 00:00"), // Fri 6th, then the 13th (a Friday too), then Fri 20th
			[]time.Time{at(time.UTC, "2026-02-06 00:00"), at(time.UTC, "2026-02-13 00:00"), at(time.UTC, "2026-02-20 00:00")}},
		{"leap day", "0 12 29 2 *", time.UTC, at(time.UTC, "2026-01-01 00:00"),
			[]time.Time{at(time.UTC, "2028-02-29 12:00")}},
		{"macro", "@monthly", time.UTC, at(time.UTC, "2026-01-15 00:00"),
			[]time.Time{at(time.UTC, "2026-02-01 00:00")}},
		{"time zone", "0 9 * * *", paris, at(time.UTC, "2026-01-01 00:00"),
			[]time.Time{at(time.UTC, "2026-01-01 08:00"), at(time.UTC, "2026-01-02 08:00")}},
		// New York springs forward on 2026-03-08 at 02:00 → 03:00.
		{"a skipped time fires when the gap ends", "30 2 * * *", ny, at(ny, "2026-03-07 03:00"),
			[]time.Time{at(ny, "2026-03-08 03:00"), at(ny, "2026-03-09 02:30")}},
		{"the gap's times fire once", "*/15 * * * *", ny, at(ny, "2026-03-08 01:45"),
			[]time.Time{at(ny, "2026-03-08 03:00"), at(ny, "2026-03-08 03:15")}},
		{"daily across spring forward keeps its wall time", "0 9 * * *", ny, at(ny, "2026-03-07 10:00"),
			[]time.Time{at(ny, "2026-03-08 09:00"), at(ny, "2026-03-09 09:00")}},
		// New York falls back on 2026-11-01 at 02:00 → 01:00.
		{"a repeated time fires once, at its first occurrence", "30 1 * * *", ny, at(ny, "2026-10-31 12:00"),
			[]time.Time{time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), at(ny, "2026-11-02 01:30")}},
		{"hourly skips the repeated hour's second run", "0 * * * *", ny, time.Date(2026, 11, 1, 4, 30, 0, 0, time.UTC), // 00:30 EDT
			[]time.Time{time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC)}}, // 01:00 EDT, 02:00 EST
		{"Paris spring forward", "30 2 * * *", paris, at(paris, "2026-03-28 12:00"),
			[]time.Time{time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), at(paris, "2026-03-30 02:30")}},
		// Lord Howe moves 02:00 → 02:30 on 2026-10-04.
		{"half-hour gap", "15 2 * * *", lordHowe, at(lordHowe, "2026-10-03 12:00"),
			[]time.Time{at(lordHowe, "2026-10-04 02:30"), at(lordHowe, "2026-10-05 02:15")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cr, err := ParseCron(c.expr, c.loc)
			if err != nil {
				t.Fatal(err)
			}
			from := c.after
			for i, want := range c.want {
				got, ok := cr.Next(from)
				if !ok || !got.Equal(want) {
					t.Fatalf("firing %d after %v: got %v (%v), want %v", i, from.In(c.loc), got.In(c.loc), ok, want.In(c.loc))
				}
				from = got
			}
		})
	}
}

func TestCronNever(t *testing.T) {
	t.Parallel()
	cr, err := ParseCron("0 0 30 2 *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := cr.Next(time.Now()); ok {
		t.Fatalf("30 February fires at %v", got)
	}
}

func TestParseCronErrors(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{
		"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 13 *", "* * * * 8", "5-1 * * * *", "*/0 * * * *", "*/61 * * * *", "a * * * *",
		"1,,2 * * * *", "-1 * * * *", "+1 * * * *", "* * * foo *", "@reboot", "1-2-3 * * * *",
		string(make([]byte, MaxCronLen+1)),
	} {
		if _, err := ParseCron(expr, nil); !errors.Is(err, ErrBadCron) {
			t.Errorf("ParseCron(%q): %v, want ErrBadCron", expr, err)
		}
	}
}

// FuzzCron: any expression either fails to parse with ErrBadCron or
// yields firings strictly increasing, each on a minute, each matching
// its fields in wall-clock time unless it ends a DST gap.
func FuzzCron(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/15 9-17 * * MON-FRI", "30 2 * * *", "0 0 29 2 *", "@hourly", "5/7 */3 1,15 * 0,7"} {
		f.Add(s, "America/New_York", int64(1772900000))
	}
	zones := map[string]*time.Location{}
	f.Fuzz(func(t *testing.T, expr, zone string, unix int64) {
		loc, ok := zones[zone]
		if !ok {
			var err error
			if loc, err = LoadZone(zone); err != nil {
				loc = time.UTC
			}
			zones[zone] = loc
		}
		cr, err := ParseCron(expr, loc)
		if err != nil {
			if !errors.Is(err, ErrBadCron) {
				t.Fatalf("error %v does not wrap ErrBadCron", err)
			}
			return
		}
		from := time.Unix(unix%(1<<33), 0)
		for range 5 {
			next, ok := cr.Next(from)
			if !ok {
				return
			}
			if !next.After(from) || next.Second() != 0 || next.Nanosecond() != 0 {
				t.Fatalf("%q after %v: %v", expr, from, next)
			}
			w := next.In(loc)
			if cr.minute&(1<<uint(w.Minute())) != 0 && cr.hour&(1<<uint(w.Hour())) != 0 && cr.dayMatches(time.Date(w.Year(), w.Month(), w.Day(), 0, 0, 0, 0, time.UTC)) && cr.month&(1<<uint(w.Month())) != 0 {
				from = next
				continue
			}
			if s, _ := next.ZoneBounds(); !s.Equal(next) {
				t.Fatalf("%q after %v: %v matches neither its fields nor a DST gap's end", expr, from, w)
			}
			from = next
		}
	})
}
