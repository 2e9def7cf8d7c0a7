package sessionfile

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/internal/conformance"
	"github.com/lanefleet/lanefleet/message"
)

func FuzzRead(f *testing.F) {
	if data, err := os.ReadFile("../message/testdata/session-v3.jsonl"); err == nil {
		f.Add(data)
	}
	for _, c := range conformance.Load(f, "session-file-repair") {
		in, _ := conformance.Decode(f, c.Input).(map[string]any)
		if s, ok := in["fileContent"].(string); ok {
			f.Add([]byte(s))
		}
	}
	f.Add([]byte(`{"type":"session","id":"s"}` + "\n" + `{"type":"compaction","summary":"s","firstKeptEntryIndex":1}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Repair never fails on content, and repairing twice changes nothing.
		if out, _, err := RepairContent(data); err == nil {
			again, dropped, err := RepairContent(out)
			if err != nil || dropped != 0 || !bytes.Equal(again, out) {
				t.Fatalf("repair not idempotent: %v %d\n%q\n%q", err, dropped, out, again)
			}
		}
		file, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		// What Write produces reads back to the same entries.
		var buf bytes.Buffer
		if err := Write(&buf, file); err != nil {
			t.Fatal(err)
		}
		back, err := Read(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("cannot read what was written: %v\n%s", err, buf.Bytes())
		}
		if len(back.Skipped) != 0 || back.Migrated {
			t.Fatalf("rewritten file skipped %v migrated %v", back.Skipped, back.Migrated)
		}
		a, _ := json.Marshal(file.Entries)
		b, _ := json.Marshal(back.Entries)
		var av, bv any
		json.Unmarshal(a, &av)
		json.Unmarshal(b, &bv)
		if !reflect.DeepEqual(av, bv) {
			t.Fatalf("round trip changed entries:\n%s\n%s", a, b)
		}
		// Entries encoded anew (AppendJSON, the entries of later turns)
		// and stored (msgpack) read back to the same entries too.
		fresh := &File{Header: file.Header.Clone()}
		fresh.Header.Raw = nil
		for _, e := range file.Entries {
			b, err := msgpack.Marshal(&e)
			if err != nil {
				t.Fatal(err)
			}
			var d message.Entry
			if err := msgpack.Unmarshal(b, &d); err != nil {
				t.Fatalf("stored entry does not decode: %v", err)
			}
			if !bytes.Equal(d.AppendJSON(nil), e.AppendJSON(nil)) {
				t.Fatalf("storage changed an entry:\n%s\n%s", e.AppendJSON(nil), d.AppendJSON(nil))
			}
			d.Raw = nil
			fresh.Entries = append(fresh.Entries, d)
		}
		buf.Reset()
		if err := Write(&buf, fresh); err != nil {
			t.Fatal(err)
		}
		again, err := Read(bytes.NewReader(buf.Bytes()))
		if err != nil || len(again.Entries) != len(file.Entries) {
			t.Fatalf("re-encoded file: %v\n%s", err, buf.Bytes())
		}
		for i := range again.Entries {
			if !bytes.Equal(again.Entries[i].AppendJSON(nil), file.Entries[i].AppendJSON(nil)) {
				t.Fatalf("re-encoding changed entry %d:\n%s\n%s", i, file.Entries[i].AppendJSON(nil), again.Entries[i].AppendJSON(nil))
			}
		}
		Messages(file.Entries)
	})
}
