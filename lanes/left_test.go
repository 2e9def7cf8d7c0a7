package lanes

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
)

// TestCursorKnownOnlyWhenUntouched: a worker that takes back a lane it
// released itself starts from the cursor it left, without reading it; once
// another owner held the lane in between (and here wrote the lane's newest
// record again, naming another session), the worker reads the cursor and
// its next turn runs on what that owner left.
func TestCursorKnownOnlyWhenUntouched(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	const key = "known"
	tok, _ := events.KeyToken(key)
	var mu sync.Mutex
	sessions := map[string]string{} // text -> the session id its turn ran under
	h := &echoHandler{hook: func(turn *Turn) error {
		mu.Lock()
		defer mu.Unlock()
		sessions[turn.Inbound.Text] = turn.SessionID
		return nil
	}}
	w := f.runWorker(t, h, Config{Linger: -1})
	released := func(n int64) {
		t.Helper()
		waitFor(t, "the worker to release the lane", func() bool { return w.stats.Released.Load() >= n })
	}
	f.waitFinal(t, key, f.publish(t, key, "one"))
	released(1)
	two := f.publish(t, key, "two")
	f.waitFinal(t, key, two)
	released(2)
	if n := w.stats.CursorsKnown.Load(); n != 1 {
		t.Fatalf("%d drains began from the cursor left, want 1: the worker took back the lane it released", n)
	}

	// Another owner takes the lane and writes its newest record again,
	// under another session id.
	lease := f.takeLane(t, tok)
	if _, err := lease.PutRecord(t.Context(), kvstore.Record{InboundSeq: two, RunID: "elsewhere", SessionID: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.waitFinal(t, key, f.publish(t, key, "three"))
	mu.Lock()
	defer mu.Unlock()
	if sessions["three"] != "elsewhere" {
		t.Fatalf("three ran under session %q, want %q (another owner's record): the worker used the cursor it had left", sessions["three"], "elsewhere")
	}
	if n := w.stats.CursorsKnown.Load(); n != 1 {
		t.Fatalf("%d drains began from the cursor left, want 1: another owner held the lane before three", n)
	}
}

// TestCursorUnknownAfterAFailedRecord: an owner whose record write failed
// cannot tell whether the record was stored, so its release names no
// cursor and the worker reads the cursor when it takes the lane back, even
// though nobody else held the lane. (Here the write is refused outright, a
// record over the server's payload limit, and the retry commits a
// small one; a write whose answer is lost is the case this guards.)
func TestCursorUnknownAfterAFailedRecord(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	const key = "unsure"
	var mu sync.Mutex
	tries := 0
	h := &echoHandler{}
	w := f.runWorker(t, HandlerFunc(func(ctx context.Context, turn *Turn) (*Outcome, error) {
		out, err := h.HandleTurn(ctx, turn)
		mu.Lock()
		defer mu.Unlock()
		if tries++; turn.Inbound.Text == "big" && tries == 2 {
			// Over the server's payload limit (8 MiB): the record write fails.
			out.Entries[0].Message.Content = message.BlocksOf(message.Text(strings.Repeat("x", 9<<20)))
		}
		return out, err
	}), Config{Linger: -1, RetryDelay: time.Millisecond})
	released := func(n int64) {
		t.Helper()
		waitFor(t, "the worker to release the lane", func() bool { return w.stats.Released.Load() >= n })
	}
	f.waitFinal(t, key, f.publish(t, key, "small"))
	released(1)
	f.waitFinal(t, key, f.publish(t, key, "big"))
	released(2)
	if n := w.stats.CursorsKnown.Load(); n != 1 {
		t.Fatalf("%d drains began from the cursor left, want 1 (big's)", n)
	}
	mu.Lock()
	if tries != 3 {
		t.Fatalf("the handler ran %d times, want 3 (big's record refused once)", tries)
	}
	mu.Unlock()
	f.waitFinal(t, key, f.publish(t, key, "after"))
	if n := w.stats.CursorsKnown.Load(); n != 1 {
		t.Fatalf("%d drains began from the cursor left, want still 1: the drain before wrote a record that failed, so its release named none", n)
	}
}
