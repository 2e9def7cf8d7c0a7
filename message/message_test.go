package message

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// canonical re-encodes JSON through a generic value so key order and number
// spelling do not matter.
func canonical(t testing.TB, data []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return normalize(v)
}

func sessionLines(t testing.TB) [][]byte {
	t.Helper()
	f, err := os.Open("testdata/session-v3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	return lines
}

func TestEntryJSONRoundTripKeepsEveryField(t *testing.T) {
	t.Parallel()
	for _, line := range sessionLines(t) {
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("unmarshal %s: %v", line, err)
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := canonical(t, out), canonical(t, line); !reflect.DeepEqual(got, want) {
			t.Errorf("round trip changed the line\n got %s\nwant %s", out, line)
		}
	}
}

func TestEntryMsgpackRoundTripKeepsEveryField(t *testing.T) {
	t.Parallel()
	for _, line := range sessionLines(t) {
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatal(err)
		}
		packed, err := msgpack.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back Entry
		if err := msgpack.Unmarshal(packed, &back); err != nil {
			t.Fatalf("msgpack unmarshal: %v", err)
		}
		out, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := canonical(t, out), canonical(t, line); !reflect.DeepEqual(got, want) {
			t.Errorf("msgpack round trip changed the line\n got %s\nwant %s", out, line)
		}
	}
}

func TestDecodedFields(t *testing.T) {
	t.Parallel()
	lines := sessionLines(t)
	var asst Entry
	if err := json.Unmarshal(lines[4], &asst); err != nil {
		t.Fatal(err)
	}
	m := asst.Message
	if m == nil || m.Role != RoleAssistant || m.StopReason != StopToolUse || m.Usage == nil || m.Usage.CacheRead != 3000 {
		t.Fatalf("assistant decoded wrong: %+v", m)
	}
	calls := m.ToolCalls()
	if len(calls) != 1 || calls[0].Name != "read" || calls[0].Arguments["path"] != "a.go" {
		t.Fatalf("tool calls = %+v", calls)
	}
	if calls[0].Extra["partialJson"] == nil {
		t.Errorf("unknown block field partialJson lost")
	}
	if *asst.ParentID != "c3d4e5f6" {
		t.Errorf("parentId = %v", *asst.ParentID)
	}
	var user Entry
	if err := json.Unmarshal(lines[6], &user); err != nil {
		t.Fatal(err)
	}
	if !user.Message.Content.IsPlain() || user.Message.Content.Text() != "plain string with é and emoji 😀" {
		t.Errorf("plain content = %+v", user.Message.Content)
	}
}

func TestFieldErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, field string
	}{
		{"role not a string", `{"role":5}`, "role"},
		{"content a number", `{"role":"user","content":7}`, "content"},
		{"block not an object", `{"role":"user","content":["x"]}`, "content[0]"},
		{"text not a string", `{"role":"user","content":[{"type":"text","text":1}]}`, "content[0].text"},
		{"usage input a string", `{"role":"assistant","content":[],"usage":{"input":"1"}}`, "usage.input"},
		{"isError a string", `{"role":"toolResult","toolCallId":"a","content":[],"isError":"no"}`, "isError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Message
			err := json.Unmarshal([]byte(tt.in), &m)
			var fe *FieldError
			if !asFieldError(err, &fe) || fe.Field != tt.field {
				t.Fatalf("err = %v, want a FieldError on %q", err, tt.field)
			}
		})
	}
}

func asFieldError(err error, target **FieldError) bool {
	for err != nil {
		if fe, ok := err.(*FieldError); ok {
			*target = fe
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

func TestCloneIsDeep(t *testing.T) {
	t.Parallel()
	m := Message{Role: RoleAssistant, Content: BlocksOf(ToolCall("a", "read", map[string]any{"p": map[string]any{"x": 1}}))}
	c := m.Clone()
	c.Content.Blocks[0].Arguments["p"].(map[string]any)["x"] = 2
	if m.Content.Blocks[0].Arguments["p"].(map[string]any)["x"] != 1 {
		t.Fatal("clone shares argument maps")
	}
}

func FuzzMessageJSON(f *testing.F) {
	for _, line := range sessionLines(f) {
		f.Add(line)
	}
	f.Add([]byte(`{"role":"user","content":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e Entry
		if err := json.Unmarshal(data, &e); err != nil {
			return
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("marshal after successful unmarshal: %v", err)
		}
		var again Entry
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("re-decode of our own output failed: %v\n%s", err, out)
		}
		out2, _ := json.Marshal(again)
		if !bytes.Equal(out, out2) {
			t.Fatalf("encoding not stable:\n%s\n%s", out, out2)
		}
		packed, err := msgpack.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		var fromPack Entry
		if err := msgpack.Unmarshal(packed, &fromPack); err != nil {
			t.Fatalf("msgpack re-decode: %v", err)
		}
	})
}

func BenchmarkMessageCodec(b *testing.B) {
	line := sessionLines(b)[4]
	var e Entry
	if err := json.Unmarshal(line, &e); err != nil {
		b.Fatal(err)
	}
	packed, _ := msgpack.Marshal(e)
	b.Run("json-decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			var x Entry
			if err := json.Unmarshal(line, &x); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack-decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(packed)))
		for b.Loop() {
			var x Entry
			if err := msgpack.Unmarshal(packed, &x); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack-encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(e); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestNonStringSignaturesKeptInExtra(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		`{"type":"thinking","thinking":"r","thinkingSignature":{"id":"rs_1","type":"reasoning"}}`,
		`{"type":"toolCall","id":"c","name":"n","arguments":{},"thoughtSignature":42}`,
	} {
		var b Block
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			t.Fatalf("unmarshal %s: %v", line, err)
		}
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := canonical(t, out), canonical(t, []byte(line)); !reflect.DeepEqual(got, want) {
			t.Errorf("round trip changed the block\n got %s\nwant %s", out, line)
		}
	}
}

// BenchmarkEntryJSON encodes an assistant entry in pi's order against the
// baseline of encoding/json on the same fields (sorted keys, HTML escaped).
func BenchmarkEntryJSON(b *testing.B) {
	m := Message{Role: RoleAssistant, API: "anthropic-messages", Provider: "anthropic", Model: "claude-sonnet-4-6", StopReason: StopStop, Timestamp: 1773570032000,
		Content: BlocksOf(Text("The handler writes a greeting with the request path; I changed the pattern to \"/hello/\" <done>."),
			Block{Type: BlockToolCall, ID: "toolu_01", Name: "read", Arguments: map[string]any{"path": "a.go", "limit": int64(200)}}),
		Usage: &Usage{Input: 400, Output: 80, CacheRead: 3000, TotalTokens: 3480, Cost: Cost{Input: 0.0012, Output: 0.0012, CacheRead: 0.0009, Total: 0.0033}}}
	parent := "c3d4e5f6"
	e := Entry{Type: EntryMessage, ID: "d4e5f6a7", ParentID: &parent, Timestamp: "2026-03-15T10:20:31.000Z", Message: &m}
	b.Run("baseline=encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(e.toObj()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pi-order", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = e.AppendJSON(buf[:0])
		}
	})
}
