package sessionfile

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/message"
)

// roundTripFiles are session files that must come back byte for byte: a
// file pi wrote, files with unusual key orders, escapes, number forms,
// spacing, CRLF, HTML characters and unknown fields, and the valid inputs
// of the session-file conformance cases.
func roundTripFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	paths, _ := filepath.Glob("testdata/roundtrip/*.jsonl")
	paths = append(paths, "../message/testdata/session-v3.jsonl")
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = data
	}
	var cases []struct {
		Name  string `json:"name"`
		Input struct {
			FileContent string `json:"fileContent"`
		} `json:"input"`
	}
	if data, err := os.ReadFile("/work/shared/conformance/session-file-repair.json"); err == nil {
		if err := json.Unmarshal(data, &cases); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		data := []byte(c.Input.FileContent)
		f, err := Read(bytes.NewReader(data))
		// Only files every line of which is kept: skipped lines, blank
		// lines and a last line without newline are not round-tripped.
		if err != nil || len(f.Skipped) > 0 || f.Migrated || !bytes.HasSuffix(data, []byte("\n")) || bytes.Contains(data, []byte("\n\n")) {
			continue
		}
		files["conformance: "+c.Name] = data
	}
	if len(files) < 4 {
		t.Fatalf("only %d files", len(files))
	}
	return files
}

// TestRoundTripBytes: reading a file and writing it back gives the same
// bytes, directly and through the msgpack encoding the lanes store and the
// lane service send.
func TestRoundTripBytes(t *testing.T) {
	t.Parallel()
	for name, data := range roundTripFiles(t) {
		f, err := Read(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var out bytes.Buffer
		if err := Write(&out, f); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Errorf("%s: written\n%s\nwant\n%s", name, out.Bytes(), data)
		}

		stored := &File{}
		for i, e := range append([]message.Entry{f.Header}, f.Entries...) {
			b, err := msgpack.Marshal(&e)
			if err != nil {
				t.Fatal(err)
			}
			var d message.Entry
			if err := msgpack.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				stored.Header = d
			} else {
				stored.Entries = append(stored.Entries, d)
			}
		}
		out.Reset()
		if err := Write(&out, stored); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Errorf("%s through msgpack: written\n%s\nwant\n%s", name, out.Bytes(), data)
		}
	}
}

// TestPiKeyOrder: entries without their line (added by later turns) are
// encoded as pi encodes them: the lines of a file pi wrote come out the
// same from the entries alone, and HTML characters stay themselves.
func TestPiKeyOrder(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../message/testdata/session-v3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, e := range append([]message.Entry{f.Header}, f.Entries...) {
		// Not from pi as they are: line 7 escapes é by hand, line 9's
		// details are a free-form object whose key order is not kept.
		if i == 6 || i == 8 {
			continue
		}
		e.Raw = nil
		if got := string(e.AppendJSON(nil)); got != lines[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, got, lines[i])
		}
	}
	m := message.Message{Role: message.RoleUser, Content: message.PlainText("<a href=\"x\">&</a> \u2028"), Timestamp: 1}
	e := message.Entry{Type: message.EntryMessage, ID: "ab", Timestamp: "2026-01-01T00:00:00.000Z", Message: &m}
	var out bytes.Buffer
	if err := Write(&out, &File{Header: message.Entry{Type: message.EntrySession, Version: 3, ID: "s", Timestamp: "t", CWD: "/w"}, Entries: []message.Entry{e}}); err != nil {
		t.Fatal(err)
	}
	want := `{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/w"}` + "\n" +
		`{"type":"message","id":"ab","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"<a href=\"x\">&</a> ` + "\u2028" + `","timestamp":1}}` + "\n"
	if out.String() != want {
		t.Errorf("written\n%s\nwant\n%s", out.String(), want)
	}
}

// TestChangedEntryIsReencoded: an entry changed after it was read is not
// written as its old line.
func TestChangedEntryIsReencoded(t *testing.T) {
	t.Parallel()
	data, _ := os.ReadFile("testdata/roundtrip/unusual.jsonl")
	f, err := Read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	f.Entries[0].Message.Content = message.PlainText("changed")
	f.Header.CWD = "/elsewhere"
	var out bytes.Buffer
	if err := Write(&out, f); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[0], `{"type":"session","version":3,"id":"s-odd-order","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/elsewhere","branchedFrom":"/tmp/a.jsonl","extra":`) ||
		!strings.Contains(lines[1], `"content":"changed"`) {
		t.Fatalf("written\n%s", out.String())
	}
	if orig := strings.Split(string(data), "\n"); lines[2] != orig[2] {
		t.Fatalf("an unchanged line changed:\n%s\n%s", lines[2], orig[2])
	}

	// A copy with a new id (a turn re-appending a branch) is stored as
	// itself, not as the line it was copied from.
	c := f.Entries[1].Clone()
	c.ID = "newid"
	b, err := msgpack.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	var d message.Entry
	if err := msgpack.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.ID != "newid" || d.Raw != nil {
		t.Fatalf("stored copy: id %q, raw %q", d.ID, d.Raw)
	}
}
