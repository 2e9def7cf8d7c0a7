package kvstore

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/message"
)

// TestEncodeRecordAsLibrary: turn records of every shape a lane writes
// encode to msgpack.Marshal's bytes (what PutRecord wrote before).
func TestEncodeRecordAsLibrary(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	str := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		return strings.Repeat(strconv.Itoa(r.IntN(10)), []int{1, 31, 32, 300}[r.IntN(4)])
	}
	num := func() uint64 { return []uint64{0, 1, 127, 128, 1 << 20, 1 << 40}[r.IntN(6)] }
	parent := "p1"
	states := []*events.SessionState{nil, {}, {AuthProfile: "a:b", Turns: 3, Usage: &events.UsageMeta{Input: 5, Cost: &events.CostMeta{Total: 0.5}}},
		{Parent: &events.Parent{Session: "s", Run: "r", Ancestors: []string{"x"}}, Children: []events.Child{{Session: "c", Run: "r2", ParentRun: "r"}},
			Approvals: []events.ApprovalCall{{ID: "1", Name: "exec"}}, ChildUsage: &events.UsageMeta{Output: 2}}}
	for i := range 2000 {
		rec := Record{InboundSeq: num(), RunID: str(), SessionID: str(), Reset: r.IntN(4) == 0, Start: num(), State: states[r.IntN(len(states))]}
		switch r.IntN(4) {
		case 0: // nil entries
		case 1:
			rec.Entries = []message.Entry{}
		default:
			for range 1 + r.IntN(3) {
				rec.Entries = append(rec.Entries, message.Entry{Type: message.EntryMessage, ID: str(), ParentID: &parent, Timestamp: str(),
					Message: &message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text(str())), Provider: str(), Timestamp: int64(num()),
						Usage: &message.Usage{Input: int64(num()), Output: 1}}})
			}
			if r.IntN(3) == 0 { // an entry of the generic path
				rec.Entries = append(rec.Entries, message.Entry{Type: message.EntryModelChange, ID: "m", Fields: map[string]any{"provider": "p"}})
			}
		}
		if r.IntN(2) == 0 {
			rec.Final = bytes.Repeat([]byte{byte(i)}, []int{1, 255, 256, 70000}[r.IntN(4)])
		}
		for range []int{0, 1, 16, 64}[r.IntN(4)] {
			rec.IDs = append(rec.IDs, queue.SeenID{Hash: num() * 7, Seq: num(), At: int64(num()) - 5})
		}
		if r.IntN(10) == 0 {
			rec.Outbox = &Outbox{Session: "parent", ID: "x", Data: []byte{1}}
		}
		want, err := msgpack.Marshal(&rec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeRecord(&rec)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("record %d %+v:\n got  %x\n want %x", i, rec, got, want)
		}
	}
}

// BenchmarkEncodeRecord: a chat turn's record (its prompt and reply, the
// session's state, 16 message ids) by encodeRecord and by the library
// (what PutRecord did before).
func BenchmarkEncodeRecord(b *testing.B) {
	parent := "a1"
	rec := &Record{InboundSeq: 1234, RunID: "0193c0de-aaaa", SessionID: "0193c0de-bbbb",
		Entries: []message.Entry{
			{Type: message.EntryMessage, ID: "b2", ParentID: &parent, Timestamp: "2026-11-30T01:00:00.000Z", Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("ping"), Timestamp: 1764464400000}},
			{Type: message.EntryMessage, ID: "c3", ParentID: &parent, Timestamp: "2026-11-30T01:00:00.001Z", Message: &message.Message{Role: message.RoleAssistant,
				Content: message.BlocksOf(message.Text("pong")), API: "openai-completions", Provider: "mock", Model: "mock-pong", StopReason: message.StopStop,
				Usage: &message.Usage{Input: 12, Output: 1, TotalTokens: 13}, Timestamp: 1764464400001}},
		},
		Final: bytes.Repeat([]byte{1}, 300),
		State: &events.SessionState{Usage: &events.UsageMeta{Input: 120, Output: 10, Total: 130}, Turns: 10}}
	for i := range 16 {
		rec.IDs = append(rec.IDs, queue.SeenID{Hash: uint64(i) * 0x9e3779b97f4a7c15, Seq: uint64(1000 + i), At: 1764464400000})
	}
	b.Run("encodeRecord", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeRecord(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
