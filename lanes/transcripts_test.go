package lanes

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/bytelru"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
)

func entryIDs(es []message.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// takeLane acquires the lane's lease once the worker has released it, as
// another worker would.
func (f *fleet) takeLane(t *testing.T, tok string) *kvstore.Lease {
	t.Helper()
	var l *kvstore.Lease
	waitFor(t, "the worker to release the lane", func() bool {
		var err error
		l, err = f.lanes.Acquire(t.Context(), tok, kvstore.LeaseInfo{Worker: "elsewhere"})
		if err != nil && !errors.Is(err, kvstore.ErrHeld) {
			t.Fatal(err)
		}
		return err == nil
	})
	return l
}

// TestTranscriptCache (issue 17 item 1): a lane's owners on one worker
// never read its whole transcript again, yet every turn's history is
// exactly what the store holds, whatever another worker did in between:
// turns added (only they are read), the newest record written again, the
// session forgotten by a retention pass whose markers expired before a new
// turn was stored elsewhere.
func TestTranscriptCache(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	const key = "cached"
	tok, _ := events.KeyToken(key)
	var mu sync.Mutex
	var seen [][]string // each turn's history, by entry id
	h := &echoHandler{hook: func(turn *Turn) error {
		if turn.SessionKey != key {
			return nil
		}
		recs, err := f.lanes.Records(t.Context(), tok)
		if err != nil {
			t.Errorf("read the store: %v", err)
		}
		got, want := entryIDs(turn.History), entryIDs(kvstore.Entries(recs))
		if !slices.Equal(got, want) {
			t.Errorf("turn %q saw history %v; the store holds %v", turn.Inbound.Text, got, want)
		}
		mu.Lock()
		seen = append(seen, got)
		mu.Unlock()
		return nil
	}}
	w := f.runWorker(t, h, Config{})
	c := w.transcripts
	turn := func(text string) uint64 {
		t.Helper()
		seq := f.publish(t, key, text)
		if ev := f.waitFinal(t, key, seq); ev.Data.Result == nil || ev.Data.Result.Payloads[0].Text != "ok "+text {
			t.Fatalf("turn %q ended with %+v", text, ev.Data)
		}
		return seq
	}
	// elsewhere stores a record of the lane as another worker's turn would,
	// at a position past every message of the lane so far.
	elsewhere := func(lease *kvstore.Lease, text string) {
		t.Helper()
		pos := f.publish(t, "filler", "x")
		f.waitFinal(t, "filler", pos)
		cur, err := f.lanes.Cursor(t.Context(), tok)
		if err != nil {
			t.Fatal(err)
		}
		u := message.User(text, 1)
		rec := kvstore.Record{InboundSeq: pos, RunID: strconv.FormatUint(pos, 10), SessionID: cur.SessionID,
			Entries: []message.Entry{{Type: message.EntryMessage, ID: text, Message: &u}}}
		if _, err := lease.PutRecord(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
	}

	for _, text := range []string{"one", "two", "three", "four"} {
		turn(text)
	}
	if n := c.reads.Load() + c.tails.Load(); n != 0 {
		t.Fatalf("one worker's turns read the transcript %d times", n)
	}

	// Another worker ran a turn: only it is read.
	lease := f.takeLane(t, tok)
	elsewhere(lease, "other-worker")
	_ = lease.Release(t.Context())
	turn("five")
	if c.tails.Load() != 1 || c.reads.Load() != 0 {
		t.Fatalf("after another worker's turn: %d tail reads, %d whole reads; want 1, 0", c.tails.Load(), c.reads.Load())
	}

	// The newest record written again (a re-run whose first write was
	// stored after all): a whole read.
	lease = f.takeLane(t, tok)
	cur, err := f.lanes.Cursor(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	u := message.User("rewritten", 1)
	if _, err := lease.PutRecord(t.Context(), kvstore.Record{InboundSeq: cur.Seq, RunID: "r", SessionID: cur.SessionID,
		Entries: []message.Entry{{Type: message.EntryMessage, ID: "rewritten", Message: &u}}}); err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(t.Context())
	turn("six")
	if c.reads.Load() != 1 {
		t.Fatalf("after a rewrite: %d whole reads, want 1", c.reads.Load())
	}

	// Forgotten elsewhere, the markers expired, then a turn elsewhere: the
	// records added only append, but the first one is gone.
	lease = f.takeLane(t, tok)
	data, err := f.lanes.Data(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Forget(t.Context(), data.Keys); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the purge markers to expire", func() bool {
		first, err := f.lanes.FirstStored(t.Context(), tok)
		if err != nil {
			t.Fatal(err)
		}
		return first == 0
	})
	elsewhere(lease, "after-forget")
	_ = lease.Release(t.Context())
	turn("seven")
	if c.reads.Load() != 2 {
		t.Fatalf("after the session was forgotten: %d whole reads, want 2", c.reads.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if last := seen[len(seen)-1]; len(last) != 1 || last[0] != "after-forget" {
		t.Fatalf("the turn after the session was forgotten saw %v", last)
	}
}

// TestTranscriptsChargeMemory (issue "what a new user trips over" item
// 14): the cache charges a lane the memory its decoded entries hold
// (message.EntriesBytes), whether they came from committed turns, a whole
// read or a tail, and not the encoded records, most of which (the lane's
// de-duplication ids, the final event) it does not keep: with 64 busy
// sessions the encoded charge filled the budget three times too early, and
// each turn then read its whole transcript again.
func TestTranscriptsChargeMemory(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	const key = "charged"
	tok, _ := events.KeyToken(key)
	w := f.runWorker(t, &echoHandler{}, Config{})
	c := w.transcripts
	turn := func(text string) {
		t.Helper()
		seq := f.publish(t, key, text)
		if ev := f.waitFinal(t, key, seq); ev.Data.Result == nil {
			t.Fatalf("turn %q ended with %+v", text, ev.Data)
		}
	}
	check := func(when string) {
		t.Helper()
		recs, err := f.lanes.Records(t.Context(), tok)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		tx, ok := c.lanes.Peek(tok)
		c.mu.Unlock()
		if !ok {
			t.Fatalf("%s: the lane is not cached", when)
		}
		if want := message.EntriesBytes(kvstore.Entries(recs)); tx.size != want || len(tx.entries) != len(kvstore.Entries(recs)) {
			t.Fatalf("%s: charged %d bytes for %d entries, want %d (their memory) for %d", when, tx.size, len(tx.entries), want, len(kvstore.Entries(recs)))
		}
	}
	for i := range 3 {
		turn("committed " + strconv.Itoa(i))
	}
	check("after committed turns")
	c.drop(tok)
	turn("after a drop")
	check("after a whole read")
}

// TestTranscriptsBudget: the cache keeps the most recently used lanes
// within its byte budget, and never keeps a lane larger than half of it.
func TestTranscriptsBudget(t *testing.T) {
	t.Parallel()
	const lane = 100 + 1 + bytelru.EntryOverhead // a lane of 100 bytes, as the cache charges it
	c := newTranscripts(4 * lane)
	for i := range 5 {
		c.put(&transcript{token: strconv.Itoa(i), first: 1, last: 1, size: 100})
	}
	if c.get("0") != nil {
		t.Fatal("lane 0 kept over the budget")
	}
	for i := 1; i < 5; i++ { // leaves 1 the least recently used
		if c.get(strconv.Itoa(i)) == nil {
			t.Fatalf("lane %d not kept", i)
		}
	}
	c.get("1") // used: now the newest
	c.put(&transcript{token: "5", first: 1, last: 1, size: 100})
	if c.get("1") == nil || c.get("2") != nil {
		t.Fatal("evicted the recently used lane instead of the oldest")
	}
	c.put(&transcript{token: "big", first: 1, last: 1, size: 2*lane - len("big") - bytelru.EntryOverhead + 1})
	if c.get("big") != nil {
		t.Fatal("kept a lane larger than half the budget")
	}
	c.drop("1")
	c.put(&transcript{token: "6", first: 1, last: 1, size: 100}) // fits in what lane 1 held
	for _, tok := range []string{"3", "4", "5", "6"} {
		if c.get(tok) == nil {
			t.Fatalf("after a drop, lane %s was evicted", tok)
		}
	}
	if c.get("1") != nil {
		t.Fatal("a dropped lane is still kept")
	}
}

// TestFinalsStoredCheckAfterReconnect: a lane's next owner on the worker that
// stored the newest record's final events skips checking them, unless the
// worker's connection reconnected since: a server that restarted may have
// lost events it had acknowledged, and the check publishes the final event
// again from the record.
func TestFinalsStoredCheckAfterReconnect(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	const key = "settled"
	tok, _ := events.KeyToken(key)
	w := f.runWorker(t, &echoHandler{}, Config{})
	first := f.publish(t, key, "one")
	f.waitFinal(t, key, first)
	_ = f.takeLane(t, tok).Release(t.Context()) // the owner has let the lane go
	cur, err := f.lanes.Cursor(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if !w.transcripts.finalsStored(tok, cur.Stored, w.nc.Stats().Reconnects) {
		t.Fatal("the worker that stored the turn's final event does not know it")
	}

	// The server lost the acknowledged final event; the worker reconnects.
	if err := f.streams.Events.DeleteMsg(t.Context(), f.streamSeqOfFinal(t, key, first)); err != nil {
		t.Fatal(err)
	}
	before := w.nc.Stats().Reconnects
	if err := w.nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker to reconnect", func() bool { return w.nc.Stats().Reconnects != before && w.nc.IsConnected() })
	if w.transcripts.finalsStored(tok, cur.Stored, w.nc.Stats().Reconnects) {
		t.Fatal("still trusted after a reconnect")
	}
	second := f.publish(t, key, "two")
	f.waitFinal(t, key, second)
	if n := f.finals(t, key, first); n != 1 {
		t.Fatalf("the first run has %d final events after the next turn, want 1 (published again)", n)
	}
}
