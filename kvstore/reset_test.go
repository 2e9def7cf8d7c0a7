package kvstore

import (
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// TestResetRecordStartsTheTranscript: a record with Reset hides every
// record written before it from the transcript's readers, and the cursor
// and the records after it name where the transcript starts.
func TestResetRecordStartsTheTranscript(t *testing.T) {
	t.Parallel()
	b := setup(t, leaseOutlivesTest)
	ctx := t.Context()
	lease, err := b.lanes.Acquire(ctx, "bob", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(id, text string) []message.Entry {
		return []message.Entry{{Type: message.EntryMessage, ID: id, Message: &message.Message{Role: message.RoleUser, Content: message.PlainText(text)}}}
	}
	put := func(r Record) Written {
		t.Helper()
		w, err := lease.PutRecord(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	put(Record{InboundSeq: 1, RunID: "1", SessionID: "old", Entries: entry("a1", "before")})
	put(Record{InboundSeq: 2, RunID: "2", SessionID: "old", Entries: entry("a2", "before too")})
	put(Record{InboundSeq: 3, RunID: "3", SessionID: "new", Reset: true, Entries: entry("b0", "first, lost")})
	// The reset turn's record written again (a retry of a write that
	// was stored but not acknowledged): the newer copy starts it.
	reset := put(Record{InboundSeq: 3, RunID: "3", SessionID: "new", Reset: true, Entries: entry("b1", "first")})
	cur, err := b.lanes.Cursor(ctx, "bob")
	if err != nil || cur.Start != reset.Seq || cur.SessionID != "new" {
		t.Fatalf("cursor after the reset: %+v, %v; want Start %d, session new", cur, err, reset.Seq)
	}
	put(Record{InboundSeq: 4, RunID: "4", SessionID: "new", Start: reset.Seq, Entries: entry("b2", "second")})
	cur, _ = b.lanes.Cursor(ctx, "bob")
	if cur.Start != reset.Seq {
		t.Fatalf("cursor after a record that follows the reset: Start %d, want %d", cur.Start, reset.Seq)
	}
	tr, err := b.lanes.ReadTranscript(ctx, "bob", 1)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range Entries(tr.Records) {
		texts = append(texts, e.Message.Content.Text())
	}
	if len(texts) != 2 || texts[0] != "first" || texts[1] != "second" || tr.First != reset.Seq || tr.Begin >= reset.Seq {
		t.Fatalf("transcript %q (first %d, begin %d); want the records from the reset (%d) on", texts, tr.First, tr.Begin, reset.Seq)
	}
}
