package kvstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
)

// bomb is issue 10's payload: a map whose array declares 2^32-1 elements.
var bomb = []byte{0x81, 0xa6, 'i', 'm', 'a', 'g', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}

// deep is arrays nested a million levels.
var deep = append(bytes.Repeat([]byte{0x91}, 1<<20), 0xc0)

func turn(seq uint64, text string) Record {
	u := message.User(text, 1)
	return Record{InboundSeq: seq, RunID: "r", SessionID: "s1",
		Entries: []message.Entry{{Type: message.EntryMessage, ID: "e" + text, Message: &u}}}
}

// TestCorruptValues: values that do not decode (an allocation bomb, deep
// nesting, garbage) are *CorruptErrors, and every reader returns what the
// lane needs to go on: the other records, the lane's position, the lease
// as held.
func TestCorruptValues(t *testing.T) {
	t.Parallel()
	b := setup(t, leaseOutlivesTest)
	ctx := t.Context()
	l, err := b.lanes.Acquire(ctx, "alice", LeaseInfo{Worker: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.PutRecord(ctx, turn(1, "one")); err != nil {
		t.Fatal(err)
	}
	for key, v := range map[string][]byte{"alice.tx.2": bomb, "alice.tx.3": deep} {
		if _, err := b.lanes.kv.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.PutRecord(ctx, turn(4, "four")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.lanes.kv.Put(ctx, "alice.tx.5", []byte("not msgpack at all")); err != nil {
		t.Fatal(err)
	}

	recs, err := b.lanes.Records(ctx, "alice")
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, events.ErrTruncated) || !errors.Is(err, events.ErrTooDeep) {
		t.Fatalf("Records err = %v, want corrupt records 2 (truncated), 3 (too deep) and 5", err)
	}
	for _, key := range []string{"alice.tx.2", "alice.tx.3", "alice.tx.5"} {
		if !strings.Contains(err.Error(), key) {
			t.Fatalf("Records err does not name %s: %v", key, err)
		}
	}
	if len(recs) != 2 || recs[0].InboundSeq != 1 || recs[1].InboundSeq != 4 {
		t.Fatalf("Records = %+v, want the readable records 1 and 4", recs)
	}
	if got := Entries(recs); len(got) != 2 || got[1].Message.Content.Text() != "four" {
		t.Fatalf("entries = %+v", got)
	}

	// The newest record is corrupt: the cursor is its key's position.
	c, err := b.lanes.Cursor(ctx, "alice")
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Key != "alice.tx.5" || ce.Seq == 0 {
		t.Fatalf("Cursor err = %v, want a CorruptError for alice.tx.5", err)
	}
	if c.Seq != 5 || c.SessionID != "" {
		t.Fatalf("Cursor = %+v, want seq 5 from the key", c)
	}
	if _, ok, err := b.lanes.Record(ctx, "alice", 2); ok || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Record(2) = %v %v, want ErrCorrupt", ok, err)
	}
	if r, ok, err := b.lanes.Record(ctx, "alice", 4); !ok || err != nil || r.InboundSeq != 4 {
		t.Fatalf("Record(4) = %+v %v %v", r, ok, err)
	}

	// A lease that does not decode is still held.
	if _, err := b.lanes.kv.Put(ctx, "bob.lease", bomb); err != nil {
		t.Fatal(err)
	}
	if _, held, err := b.lanes.Holder(ctx, "bob"); !held || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Holder = %v %v, want held with ErrCorrupt", held, err)
	}
}

// TestRecordDeepArguments: tool call arguments as deep as encoding/json
// accepts are stored and read back (the walk's depth limit leaves room for
// the record around them).
func TestRecordDeepArguments(t *testing.T) {
	t.Parallel()
	const jsonMax = 10000 // encoding/json's nesting limit
	var args map[string]any
	doc := strings.Repeat(`{"a":`, jsonMax) + "1" + strings.Repeat("}", jsonMax)
	if err := json.Unmarshal([]byte(doc), &args); err != nil {
		t.Fatal(err)
	}
	asst := message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.ToolCall("c1", "read", args)), StopReason: message.StopToolUse}
	rec := Record{InboundSeq: 9, Entries: []message.Entry{{Type: message.EntryMessage, ID: "a1", Message: &asst}}}
	data, err := msgpack.Marshal(&rec)
	if err != nil {
		t.Fatal(err)
	}
	var back Record
	if err := decode("k", 1, data, &back); err != nil {
		t.Fatalf("a record with arguments at JSON's depth limit does not decode: %v", err)
	}
	if calls := back.Entries[0].Message.ToolCalls(); len(calls) != 1 || calls[0].Arguments["a"] == nil {
		t.Fatalf("decoded = %+v", back.Entries[0].Message)
	}
}

// FuzzDecodeRecord: no bytes make the record decoder panic, allocate
// beyond the payload or overflow the stack; what decodes encodes and
// decodes again.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := msgpack.Marshal(turn(3, "hello"))
	f.Add(good)
	f.Add(bomb)
	f.Add(deep[len(deep)-20000:])
	// A record whose entries array lies about its length.
	f.Add(append([]byte{0x81, 0xa7, 'e', 'n', 't', 'r', 'i', 'e', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff}, good...))
	f.Add([]byte("not msgpack"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Record
		if err := decode("k", 1, data, &r); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error is not ErrCorrupt: %v", err)
			}
			return
		}
		again, err := msgpack.Marshal(&r)
		if err != nil {
			return // e.g. an entry the message package cannot write back
		}
		var r2 Record
		if err := decode("k", 1, again, &r2); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
