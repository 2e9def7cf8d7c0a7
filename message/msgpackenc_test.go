package message

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// sortedGeneric is v's generic form as the library encodes it with every
// map's keys sorted: what appendEntry and appendMessage must write.
func sortedGeneric(t *testing.T, o obj) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(o); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// randomEntry is a message entry of the shapes a turn stores: any role,
// plain or block content of every block type, usage or none, every
// optional field set or not.
func randomEntry(r *rand.Rand) Entry {
	str := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		n := []int{1, 7, 31, 32, 300}[r.IntN(5)]
		if r.IntN(200) == 0 {
			n = 70000 // str32, rarely: slow to compare
		}
		return strings.Repeat(strconv.Itoa(r.IntN(10)), n)
	}
	num := func() int64 { return []int64{0, 1, 200, 1 << 40, -5}[r.IntN(5)] }
	flt := func() float64 { return []float64{0, 0.25, 1e-9, 3}[r.IntN(4)] }
	m := Message{Role: []Role{RoleUser, RoleAssistant, RoleToolResult}[r.IntN(3)], API: str(), Provider: str(), Model: str(),
		StopReason: StopReason(str()), ErrorMessage: str(), ToolCallID: str(), ToolName: str(), IsError: r.IntN(2) == 0, Timestamp: num()}
	if r.IntN(3) == 0 {
		m.Content = PlainText(str())
	} else {
		n := []int{0, 1, 2, 17}[r.IntN(4)]
		for range n {
			var b Block
			switch r.IntN(4) {
			case 0:
				b = Block{Type: BlockText, Text: str(), TextSignature: str()}
			case 1:
				b = Block{Type: BlockThinking, Thinking: str(), ThinkingSignature: str(), Redacted: r.IntN(2) == 0}
			case 2:
				b = Block{Type: BlockImage, Data: str(), MimeType: str()}
			default:
				b = Block{Type: BlockToolCall, ID: str(), Name: str(), ThoughtSignature: str()}
			}
			m.Content.Blocks = append(m.Content.Blocks, b)
		}
	}
	if r.IntN(2) == 0 {
		m.Usage = &Usage{Input: num(), Output: num(), CacheRead: num(), CacheWrite: num(), TotalTokens: num(),
			Cost: Cost{Input: flt(), Output: flt(), CacheRead: flt(), CacheWrite: flt(), Total: flt()}}
	}
	e := Entry{Type: EntryMessage, ID: str(), Timestamp: str(), Message: &m}
	if r.IntN(2) == 0 {
		p := str()
		e.ParentID = &p
	}
	return e
}

// TestAppendEntryAsGeneric: the hand-written entries and messages are the
// generic path's bytes with keys sorted, decode to the same entry, and
// what they leave to the generic path still goes through it.
func TestAppendEntryAsGeneric(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 2000 {
		e := randomEntry(r)
		got, ok := appendEntry([]byte("prefix"), &e)
		if !ok {
			t.Fatalf("entry %d: left to the generic path", i)
		}
		if want := sortedGeneric(t, e.toObj()); !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("entry %d %+v:\n got  %x\n want %x", i, *e.Message, got[len("prefix"):], want)
		}
		gotm, ok := appendMessage(nil, e.Message)
		if want := sortedGeneric(t, e.Message.toObj()); !ok || !bytes.Equal(gotm, want) {
			t.Fatalf("message %d: got %x (%v), want %x", i, gotm, ok, want)
		}
		// Through the library, as a record's entries are stored.
		data, err := msgpack.Marshal(struct{ Entries []Entry }{[]Entry{e, e}})
		if err != nil {
			t.Fatal(err)
		}
		var back struct{ Entries []Entry }
		if err := msgpack.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		want := sortedGeneric(t, e.toObj())
		for _, b := range back.Entries {
			if again := sortedGeneric(t, b.toObj()); !bytes.Equal(again, want) {
				t.Fatalf("entry %d decodes to %+v", i, *b.Message)
			}
		}
	}
	// Left to the generic path: they encode as before.
	args := Block{Type: BlockToolCall, ID: "c", Name: "read", Arguments: map[string]any{"path": "a"}}
	for _, e := range []Entry{
		{Type: EntryMessage, ID: "1", Message: &Message{Role: RoleAssistant, Content: BlocksOf(args)}},
		{Type: EntryMessage, ID: "2", Message: &Message{Role: RoleToolResult, Details: map[string]any{"n": int64(1)}}},
		{Type: EntryMessage, ID: "3", Message: &Message{Role: RoleUser, Extra: map[string]any{"x": "y"}}},
		{Type: EntryMessage, ID: "4", Message: &Message{Role: "bashExecution"}},
		{Type: EntryModelChange, ID: "5", Fields: map[string]any{"provider": "p"}},
		{Type: EntrySession, ID: "6", Version: 3},
	} {
		if _, ok := appendEntry(nil, &e); ok {
			t.Fatalf("%s: written by hand", e.ID)
		}
		var buf bytes.Buffer
		if err := msgpack.NewEncoder(&buf).Encode(e); err != nil {
			t.Fatal(err)
		}
		var back Entry
		if err := msgpack.Unmarshal(buf.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sortedGeneric(t, back.toObj()), sortedGeneric(t, e.toObj())) {
			t.Fatalf("%s: decodes to %+v", e.ID, back)
		}
	}
}

// BenchmarkEncodeEntry: a turn's two entries (the prompt and the reply)
// encoded as a record holds them, by hand and by the generic path.
func BenchmarkEncodeEntry(b *testing.B) {
	parent := "a1"
	entries := []Entry{
		{Type: EntryMessage, ID: "b2", ParentID: &parent, Timestamp: "2026-11-30T01:00:00.000Z", Message: &Message{Role: RoleUser, Content: PlainText("ping"), Timestamp: 1764464400000}},
		{Type: EntryMessage, ID: "c3", ParentID: &parent, Timestamp: "2026-11-30T01:00:00.001Z", Message: &Message{Role: RoleAssistant, Content: BlocksOf(Text("pong")),
			API: "openai-completions", Provider: "mock", Model: "mock-pong", StopReason: StopStop, Usage: &Usage{Input: 12, Output: 1, TotalTokens: 13}, Timestamp: 1764464400001}},
	}
	b.Run("EncodeMsgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(entries); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("generic", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var buf bytes.Buffer
			enc := msgpack.NewEncoder(&buf)
			_ = enc.EncodeArrayLen(len(entries))
			for _, e := range entries {
				if err := encodeMsgpackObj(enc, e.toObj()); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
