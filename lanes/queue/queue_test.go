package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/ecmatext"
)

var t0 = time.UnixMilli(1750000000000)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestParseMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want Mode
		ok   bool
	}{
		{"queue", ModeSteer, true},        // reference alias of steer
		{" STEERING ", ModeSteer, true},   // trimmed, case-insensitive
		{"followups", ModeFollowup, true}, // plural alias
		{"enqueue", ModeFollowup, true},   // LangGraph name
		{"coalesce", ModeCollect, true},   // reference alias of collect
		{"steer+backlog", ModeSteerBacklog, true},
		{"steer_backlog", ModeSteerBacklog, true},
		{"abort", ModeInterrupt, true},   // reference alias of interrupt
		{"reject", ModeReject, true},     // LangGraph name
		{"rollback", ModeRollback, true}, // LangGraph name
		{"", "", false},                  // empty is unset
		{"drop", "", false},              // unknown
	}
	for _, tt := range tests {
		got, ok := ParseMode(tt.raw)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, %v", tt.raw, got, ok, tt.want, tt.ok)
		}
	}
	for raw, want := range map[string]DropPolicy{"Newest": DropNew, "old": DropOld, "summary": DropSummarize} {
		if got, ok := ParseDropPolicy(raw); !ok || got != want {
			t.Errorf("ParseDropPolicy(%q) = %q, %v", raw, got, ok)
		}
	}
}

func TestSummaryLine(t *testing.T) {
	t.Parallel()
	// Whitespace runs (including newlines and NBSP) collapse to one space.
	if got := SummaryLine("  a \n\t b\u00a0 c "); got != "a b c" {
		t.Errorf("collapse: %q", got)
	}
	// 160 units stay; 161 are cut to 159 plus "…".
	if got := SummaryLine(strings.Repeat("x", 160)); got != strings.Repeat("x", 160) {
		t.Errorf("160: %q", got)
	}
	if got := SummaryLine(strings.Repeat("x", 161)); got != strings.Repeat("x", 159)+"…" {
		t.Errorf("161: %q", got)
	}
	// Emoji count two units and are never split.
	got := SummaryLine(strings.Repeat("😀", 81))
	if got != strings.Repeat("😀", 79)+"…" {
		t.Errorf("emoji: %q (%d units)", got, ecmatext.Len(got))
	}
	// Whitespace before the cut is trimmed before the ellipsis.
	if got := SummaryLine(strings.Repeat("x", 158) + " yyy"); got != strings.Repeat("x", 158)+"…" {
		t.Errorf("trim: %q", got)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	zero := time.Duration(0)
	two := 2 * time.Second
	// First set value wins per field; the rest fall back to defaults.
	got := Resolve(Overrides{Cap: 5}, Overrides{Mode: ModeSteer, Debounce: &zero}, Overrides{Mode: ModeFollowup, Debounce: &two, Drop: DropOld})
	want := Settings{Mode: ModeSteer, Debounce: 0, Cap: 5, Drop: DropOld}
	if got != want {
		t.Errorf("Resolve = %+v, want %+v", got, want)
	}
	if got := Resolve(); got != DefaultSettings() {
		t.Errorf("Resolve() = %+v", got)
	}
	// A debounce stored before DebounceMax existed (up to an hour) counts
	// as DebounceMax; a negative one as 0.
	hour, neg := time.Hour, -time.Second
	if got := Resolve(Overrides{Debounce: &hour}); got.Debounce != DebounceMax {
		t.Errorf("an hour's debounce resolves to %v, want %v", got.Debounce, DebounceMax)
	}
	if got := Resolve(Overrides{Debounce: &neg}); got.Debounce != 0 {
		t.Errorf("a negative debounce resolves to %v, want 0", got.Debounce)
	}
}
