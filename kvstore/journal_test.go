package kvstore

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestStepJournal: steps are read in step order up to the first missing
// one, a step written again replaces the earlier one, each turn has its own
// journal, and an owner whose journal a re-run claimed (a zombie whose
// lease moved on) cannot add a step the re-run or a later one would read.
func TestStepJournal(t *testing.T) {
	t.Parallel()
	b := setup(t, 2*time.Second)
	ctx := t.Context()
	read := func(seq uint64) []string {
		t.Helper()
		raw, err := b.lanes.Journal("j", seq).Steps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range raw {
			out = append(out, string(s))
		}
		return out
	}
	put := func(j *Journal, n int, data string) {
		t.Helper()
		if err := j.Put(ctx, n, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	want := func(seq uint64, w ...string) {
		t.Helper()
		if got := read(seq); !slices.Equal(got, w) {
			t.Fatalf("turn %d's steps %q, want %q", seq, got, w)
		}
	}
	want(6) // nothing recorded (and the read claimed turn 6's journal)
	if err := b.lanes.Journal("j", 6).Put(ctx, 1, []byte("late")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a first attempt's step after a re-run read the empty journal: %v, want ErrLeaseLost", err)
	}
	first := b.lanes.Journal("j", 7) // the first attempt: it never reads
	put(first, 2, "b")
	put(first, 1, "a")
	put(first, 4, "d") // after a gap: not part of the journal
	// A re-run claims the journal by reading it: the first attempt, still
	// running (a zombie), can add nothing from then on.
	rerun := b.lanes.Journal("j", 7)
	got, err := rerun.Steps(ctx)
	if err != nil || len(got) != 2 || string(got[0]) != "a" || string(got[1]) != "b" {
		t.Fatalf("re-run read %q, %v; want [a b]", got, err)
	}
	if err := first.Put(ctx, 3, []byte("zombie")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("zombie's step after the re-run read: %v, want ErrLeaseLost", err)
	}
	put(rerun, 1, "a2")
	put(rerun, 3, "c")
	// The reads below claim the journal in turn; each sees what the owner
	// before it recorded, and the re-run is then the zombie.
	want(7, "a2", "b", "c", "d")
	if err := rerun.Put(ctx, 5, []byte("e")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("re-run's step after a later read: %v, want ErrLeaseLost", err)
	}
	want(7, "a2", "b", "c", "d")

	// Turn 8 has a journal of its own: its first attempt writes while turn
	// 7's steps are there, and reads keep the two apart.
	eight := b.lanes.Journal("j", 8)
	put(eight, 1, "other turn")
	want(8, "other turn")
	want(7, "a2", "b", "c", "d")

	// An attempt that believes it is the first but is not (the journal has
	// steps it never read) cannot write over them.
	if err := b.lanes.Journal("j", 8).Put(ctx, 1, []byte("blind")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a blind first write over a recorded journal: %v, want ErrLeaseLost", err)
	}

	// A committed turn's journal is dropped; a lane's forgotten session
	// drops every journal of the lane.
	if err := eight.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	want(8)
	want(7, "a2", "b", "c", "d")
	if err := b.lanes.dropLane(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	want(7)

	// Hostile steps are refused at the edge.
	for _, n := range []int{0, -1, MaxStepReads + 1} {
		if err := b.lanes.Journal("j", 9).Put(ctx, n, []byte("x")); err == nil {
			t.Fatalf("step %d accepted", n)
		}
	}
	if err := b.lanes.Journal("j", 9).Put(ctx, 1, nil); err == nil {
		t.Fatal("an empty step accepted")
	}
}

// TestStepJournalKeepsOneCopyPerSubject: every re-run writes its barrier
// on the turn's barrier subject; the journal keeps the newest one only, so
// a read fetches each step and one barrier however often a turn re-ran.
func TestStepJournalKeepsOneCopyPerSubject(t *testing.T) {
	t.Parallel()
	b := setup(t, 2*time.Second)
	ctx := t.Context()
	for range 5 { // five re-runs read (and bar) the journal
		if _, err := b.lanes.Journal("k", 3).Steps(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st, err := b.js.Stream(ctx, StepsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("five re-runs left %d messages in the journal, want their newest barrier only", info.State.Msgs)
	}
}
