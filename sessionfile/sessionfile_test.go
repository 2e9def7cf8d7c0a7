package sessionfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
)

func canonLines(t testing.TB, data []byte) []any {
	t.Helper()
	var out []any
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("line %s: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}

func TestReadWriteRoundTrip(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../message/testdata/session-v3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if f.Migrated || len(f.Skipped) != 0 {
		t.Errorf("migrated=%v skipped=%v", f.Migrated, f.Skipped)
	}
	var buf bytes.Buffer
	if err := Write(&buf, f); err != nil {
		t.Fatal(err)
	}
	if got, want := canonLines(t, buf.Bytes()), canonLines(t, data); !reflect.DeepEqual(got, want) {
		t.Errorf("round trip changed the file\n got %s\nwant %s", buf.Bytes(), data)
	}
}

func TestReadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		err     error
		skipped int
		entries int
	}{
		{"empty", "", ErrEmpty, 0, 0},
		{"blank lines only", "\n  \r\n\t\n", ErrEmpty, 0, 0},
		{"no header", `{"type":"message","id":"a","parentId":null}` + "\n", ErrInvalidHeader, 0, 0},
		{"header without id", `{"type":"session","version":3}` + "\n", ErrInvalidHeader, 0, 0},
		{"garbage only", "nope\n", ErrInvalidHeader, 0, 0},
		{"malformed lines skipped", `{"type":"session","version":3,"id":"s"}` + "\nnot json\n" +
			`{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":5}}` + "\n" +
			`{"type":"label","id":"b","parentId":null,"targetId":"a"}`, nil, 2, 1},
		{"no trailing newline and CRLF", "{\"type\":\"session\",\"version\":3,\"id\":\"s\"}\r\n{\"type\":\"custom\",\"id\":\"c\",\"parentId\":null,\"customType\":\"x\"}", nil, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := Read(strings.NewReader(tt.in))
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if len(f.Skipped) != tt.skipped || len(f.Entries) != tt.entries {
				t.Errorf("skipped %d entries %d, want %d %d", len(f.Skipped), len(f.Entries), tt.skipped, tt.entries)
			}
		})
	}
}

func TestReadLongLine(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 3<<20)
	in := `{"type":"session","version":3,"id":"s"}` + "\n" +
		`{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"` + big + `"}}` + "\n"
	f, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Entries) != 1 || f.Entries[0].Message.Content.Text() != big {
		t.Fatal("long line lost")
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	v1 := strings.Join([]string{
		`{"type":"session","id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p","provider":"anthropic","thinkingLevel":"off"}`,
		`{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}`,
		`{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"hookMessage","customType":"x","content":"c","display":true,"timestamp":2}}`,
		`{"type":"compaction","timestamp":"2025-01-01T00:00:03.000Z","summary":"s","firstKeptEntryIndex":2,"tokensBefore":10}`,
	}, "\n")
	f, err := decode(strings.NewReader(v1))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if !Migrate(f, func() string { n++; return fmt.Sprintf("id%06d", n) }) {
		t.Fatal("not migrated")
	}
	var buf bytes.Buffer
	if err := Write(&buf, f); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p","provider":"anthropic","thinkingLevel":"off"}`,
		`{"type":"message","id":"id000001","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}`,
		`{"type":"message","id":"id000002","parentId":"id000001","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"custom","customType":"x","content":"c","display":true,"timestamp":2}}`,
		`{"type":"compaction","id":"id000003","parentId":"id000002","timestamp":"2025-01-01T00:00:03.000Z","summary":"s","firstKeptEntryId":"id000002","tokensBefore":10}`,
	}, "\n")
	if got, w := canonLines(t, buf.Bytes()), canonLines(t, []byte(want)); !reflect.DeepEqual(got, w) {
		t.Errorf("got\n%s\nwant\n%s", buf.Bytes(), want)
	}
	if Migrate(f, nil) {
		t.Error("second migration changed the file")
	}
}

func TestMessages(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		`{"type":"session","version":3,"id":"s"}`,
		`{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":"one"}}`,
		`{"type":"message","id":"b","parentId":"a","timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"assistant","content":[{"type":"text","text":"two"}]}}`,
		`{"type":"message","id":"c","parentId":"b","timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":"three"}}`,
		`{"type":"message","id":"x","parentId":"a","timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":"other branch"}}`,
		`{"type":"compaction","id":"d","parentId":"c","timestamp":"2025-01-01T00:00:01.000Z","summary":"sum","firstKeptEntryId":"c","tokensBefore":5}`,
		`{"type":"custom","id":"e","parentId":"d","timestamp":"2025-01-01T00:00:02.000Z","customType":"model-snapshot","data":{}}`,
		`{"type":"custom_message","id":"f","parentId":"e","timestamp":"2025-01-01T00:00:03.000Z","customType":"note","content":"n","display":false}`,
		`{"type":"branch_summary","id":"g","parentId":"f","timestamp":"2025-01-01T00:00:04.000Z","fromId":"x","summary":"went elsewhere"}`,
	}, "\n")
	f, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(Messages(f.Entries))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"compactionSummary","summary":"sum","tokensBefore":5,"timestamp":1735689601000},
		{"role":"user","content":"three"},
		{"role":"custom","customType":"note","content":"n","display":false,"timestamp":1735689603000},
		{"role":"branchSummary","fromId":"x","summary":"went elsewhere","timestamp":1735689604000}]`
	var g, w any
	json.Unmarshal(got, &g)
	json.Unmarshal([]byte(want), &w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestBranchStopsOnLoops(t *testing.T) {
	t.Parallel()
	p := func(s string) *string { return &s }
	entries := []message.Entry{
		{Type: "label", ID: "a", ParentID: p("b")},
		{Type: "label", ID: "b", ParentID: p("a")},
	}
	if got := Branch(entries); len(got) != 2 {
		t.Errorf("got %d entries", len(got))
	}
}

func TestStringify(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`{ "b": 1, "a": [ 1.0, -0, 1e2, 1E-7, 0.000001, 123456789012345678901234, 1.5e300, 12345678901234567890 ] }`,
			`{"b":1,"a":[1,0,100,1e-7,0.000001,1.2345678901234569e+23,1.5e+300,12345678901234567000]}`},
		{`"\u00e9\/\u0001\"\\\n\u2028"`, "\"é/\\u0001\\\"\\\\\\n\u2028\""},
		{`[]`, `[]`},
		{`{}`, `{}`},
		{` null `, `null`},
		{`[true,false,{"x":{}}]`, `[true,false,{"x":{}}]`},
		{`1e400`, `null`},
		{`1e-400`, `0`},
		{`42`, `42`},
		// Checked against node's JSON.stringify(JSON.parse(x)).
		{`[5e-324, 0.1, 1e21, 1e20, 123e-20]`, `[5e-324,0.1,1e+21,100000000000000000000,1.23e-18]`},
		{`{"b":1,"2":2,"10":3,"1":4,"01":5,"a":6,"4294967294":7,"4294967295":8,"-1":9}`,
			`{"1":4,"2":2,"10":3,"4294967294":7,"b":1,"01":5,"a":6,"4294967295":8,"-1":9}`},
		{`{"a":1,"b":2,"a":3}`, `{"a":3,"b":2}`},
		{`{"x":[{"2":1,"1":{"z":0,"0":1}}]}`, `{"x":[{"1":{"0":1,"z":0},"2":1}]}`},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		if err := stringify(&buf, []byte(tt.in)); err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if buf.String() != tt.want {
			t.Errorf("stringify(%s) = %s, want %s", tt.in, buf.String(), tt.want)
		}
	}
	for _, bad := range []string{`{`, `{"a" 1}`, `[1,]`, `{} {}`, `nope`, `[1 2]`, `{"a":1,}`, `'x'`, `NaN`} {
		var buf bytes.Buffer
		if err := stringify(&buf, []byte(bad)); err == nil {
			t.Errorf("stringify(%s) accepted: %s", bad, buf.String())
		}
	}
}

func TestRepairContent(t *testing.T) {
	t.Parallel()
	header := `{"type":"session","version":3,"id":"s"}`
	tests := []struct {
		name, in, want string
		dropped        int
		err            error
	}{
		{"clean", header + "\n", header + "\n", 0, nil},
		{"scalar lines count as entries", header + "\n42\nnull\n{bad\n", header + "\n42\nnull\n", 1, nil},
		{"bad first line then header", "oops\n" + header + "\n", header + "\n", 1, nil},
		{"header not first", `{"type":"x"}` + "\n" + header + "\nbad", "", 1, ErrInvalidHeader},
		{"only garbage", "a\nb\n", "", 2, ErrEmpty},
	}
	for _, tt := range tests {
		out, dropped, err := RepairContent([]byte(tt.in))
		if !errors.Is(err, tt.err) || string(out) != tt.want || dropped != tt.dropped {
			t.Errorf("%s: got %q %d %v, want %q %d %v", tt.name, out, dropped, err, tt.want, tt.dropped, tt.err)
		}
	}
}

func TestRepairKeepsModeAndBacksUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := dir + "/s.jsonl"
	orig := `{"type":"session","version":3,"id":"s"}` + "\n{broken\n"
	if err := os.WriteFile(path, []byte(orig), 0o640); err != nil {
		t.Fatal(err)
	}
	res := Repair(path, RepairOptions{})
	if !res.Repaired || res.DroppedLines != 1 {
		t.Fatalf("%+v", res)
	}
	for _, p := range []string{path, res.BackupPath} {
		info, err := os.Stat(p)
		if err != nil || info.Mode().Perm() != 0o640 {
			t.Errorf("%s: mode %v, err %v", p, info.Mode(), err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("left %d files (temporary file not cleaned?)", len(entries))
	}
}

func TestNewCustomEntry(t *testing.T) {
	t.Parallel()
	parent := "abcd1234"
	e := NewCustomEntry("model-snapshot", map[string]any{"provider": "openai"}, &parent, time.UnixMilli(1750000000123))
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	// pi's order: appendCustomEntry builds {type, customType, data, id, parentId, timestamp}.
	want := fmt.Sprintf(`{"type":"custom","customType":"model-snapshot","data":{"provider":"openai"},"id":%q,"parentId":"abcd1234","timestamp":"2025-06-15T15:06:40.123Z"}`, e.ID)
	if string(data) != want || len(e.ID) != 8 {
		t.Errorf("got  %s\nwant %s", data, want)
	}
}

func TestReadWriteEntries(t *testing.T) {
	t.Parallel()
	in := `{"type":"session","version":3,"id":"s"}` + "\n" + `{"type":"label","id":"a","parentId":null,"targetId":"x","label":"l"}` + "\n"
	lines, err := ReadEntries(strings.NewReader(in))
	if err != nil || len(lines) != 2 || !lines[0].IsHeader() {
		t.Fatalf("%v %v", lines, err)
	}
	var buf bytes.Buffer
	if err := WriteEntries(&buf, lines); err != nil {
		t.Fatal(err)
	}
	if got, want := canonLines(t, buf.Bytes()), canonLines(t, []byte(in)); !reflect.DeepEqual(got, want) {
		t.Errorf("got %s", buf.Bytes())
	}
	if err := WriteEntries(&buf, lines[1:]); !errors.Is(err, ErrInvalidHeader) {
		t.Errorf("no header: %v", err)
	}
}
