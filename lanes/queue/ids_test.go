package queue

import (
	"fmt"
	"testing"
	"time"
)

// TestIDs: a message duplicates the first earlier message of its lane with
// its id stored within the window before it; the decision depends only on
// the two messages (noting again, or starting from what a record carried,
// decides alike).
func TestIDs(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Minute
	type note struct {
		id   string
		seq  uint64
		at   time.Duration // after t0
		want uint64        // the message it duplicates; 0: none
	}
	tests := []struct {
		name  string
		notes []note
	}{
		{"distinct ids", []note{{"a", 1, 0, 0}, {"b", 2, time.Second, 0}}},
		{"a resend", []note{{"a", 1, 0, 0}, {"a", 2, 5 * time.Second, 1}}},
		{"points at the first", []note{{"a", 1, 0, 0}, {"a", 2, time.Second, 1}, {"a", 3, 2 * time.Second, 1}}},
		{"at the window's end", []note{{"a", 1, 0, 0}, {"a", 2, window, 1}}},
		// Past the window the id is new again, and the later message the
		// first of it.
		{"past the window", []note{{"a", 1, 0, 0}, {"a", 2, window + time.Millisecond, 0}, {"a", 3, window + time.Second, 2}}},
		// Read again (a later plan, a steer poll): the same answer.
		{"noted again", []note{{"a", 1, 0, 0}, {"a", 1, 0, 0}, {"a", 2, time.Second, 1}, {"a", 2, time.Second, 1}}},
		{"no id", []note{{"", 1, 0, 0}, {"", 2, time.Second, 0}}},
	}
	t0 := time.UnixMilli(1_800_000_000_000)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := NewIDs(window, nil)
			for _, n := range tt.notes {
				if got := d.Note(n.id, n.seq, t0.Add(n.at)); got != n.want {
					t.Fatalf("Note(%q, %d) = %d, want %d", n.id, n.seq, got, n.want)
				}
			}
			// A new owner starting from the record of the last message
			// decides alike.
			last := tt.notes[len(tt.notes)-1]
			next := NewIDs(window, d.Recent(last.seq, t0.Add(last.at)))
			for _, n := range tt.notes {
				if n.id != "" && n.want != 0 && n.seq == last.seq {
					if got := next.Note(n.id, n.seq, t0.Add(n.at)); got != n.want {
						t.Fatalf("after the record: Note(%q, %d) = %d, want %d", n.id, n.seq, got, n.want)
					}
				}
			}
		})
	}
}

// TestIDsRecent: a record carries the ids of the messages its turn
// consumed, not those read ahead, only those a later message can still
// duplicate, and at most MaxRecentIDs, the newest.
func TestIDsRecent(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_800_000_000_000)
	d := NewIDs(time.Minute, nil)
	d.Note("old", 1, t0)
	for i := range MaxRecentIDs + 5 {
		d.Note(fmt.Sprint("m", i), uint64(i+2), t0.Add(2*time.Minute))
	}
	d.Note("ahead", 1000, t0.Add(2*time.Minute))
	got := d.Recent(MaxRecentIDs+6, t0.Add(2*time.Minute))
	if len(got) != MaxRecentIDs || got[0].Seq != 7 || got[len(got)-1].Seq != MaxRecentIDs+6 {
		t.Fatalf("recent = %d ids from %d to %d, want %d from 7", len(got), got[0].Seq, got[len(got)-1].Seq, MaxRecentIDs)
	}
	for _, s := range got {
		if s.Hash == IDHash("old") || s.Hash == IDHash("ahead") {
			t.Fatalf("recent carries %+v", s)
		}
	}
}

// TestIDsKnown: the watch of a running turn asks whether an arriving
// message uses an id seen within the window; a clone does not see later
// notes.
func TestIDsKnown(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_800_000_000_000)
	d := NewIDs(time.Minute, []SeenID{{Hash: IDHash("a"), Seq: 1, At: t0.UnixMilli()}})
	c := d.Clone()
	d.Note("b", 2, t0)
	if !c.Known("a", t0.Add(time.Minute)) || c.Known("a", t0.Add(time.Minute+time.Millisecond)) || c.Known("b", t0) || c.Known("", t0) {
		t.Fatal("Known answers wrongly")
	}
	if !d.Known("b", t0) {
		t.Fatal("a noted id is not known")
	}
}

// TestIDsForget: a long drain's ids do not pile up: those no later message
// can duplicate are forgotten; those within the window stay.
func TestIDsForget(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_800_000_000_000)
	d := NewIDs(time.Minute, nil)
	n := 10 * MaxRecentIDs
	for i := range n {
		d.Note(fmt.Sprint("m", i), uint64(i+1), t0.Add(time.Duration(i)*time.Second))
	}
	if len(d.first) > 4*MaxRecentIDs+1 {
		t.Fatalf("%d ids kept after %d messages", len(d.first), n)
	}
	last := t0.Add(time.Duration(n-1) * time.Second)
	if got := d.Note(fmt.Sprint("m", n-60), uint64(n+1), last); got != uint64(n-59) {
		t.Fatalf("a resend within the window: %d, want %d", got, n-59)
	}
}
