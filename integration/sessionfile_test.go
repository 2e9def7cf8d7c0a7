package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestSessionFileRoundTrip: a pi session file imported through the lane
// service and exported through the client comes back byte for byte (pi's
// own file, files with odd key orders, escapes, numbers, CRLF, HTML
// characters, unknown header and entry fields); after a turn, the export
// is the same bytes followed by the turn's entries, written as pi writes
// them; a file nested too deep is refused and stores nothing.
func TestSessionFileRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", Scripted: true, DefaultModel: "scripted/echo", NoBuiltinTools: true})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	paths, _ := filepath.Glob("../sessionfile/testdata/roundtrip/*.jsonl")
	paths = append(paths, "../message/testdata/session-v3.jsonl")
	files := map[string][]byte{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = data
	}
	for i, name := range sortedKeys(files) {
		data := files[name]
		session := fmt.Sprintf("import:%d", i)
		if err := c.Import(ctx, session, bytes.NewReader(data)); err != nil {
			t.Fatalf("%s: import: %v", name, err)
		}
		var out bytes.Buffer
		if err := c.Export(ctx, session, &out); err != nil {
			t.Fatalf("%s: export: %v", name, err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Errorf("%s: exported\n%s\nwant\n%s", name, out.Bytes(), data)
		}
		// History, which does not ask for the lines, gets none.
		h, err := c.History(ctx, session)
		if err != nil || len(h) == 0 {
			t.Fatalf("%s: history: %d entries, %v", name, len(h), err)
		}
		for _, e := range h {
			if e.Raw != nil {
				t.Fatalf("%s: history entry %s carries its line", name, e.ID)
			}
		}
	}

	// A turn on an imported session: the file, then the turn in pi's form.
	session := "import:turn"
	data := files["unusual.jsonl"]
	if err := c.Import(ctx, session, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	run, err := c.Send(ctx, session, "<b>Tom & Jerry</b>")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.Export(ctx, session, &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out.Bytes(), data) {
		t.Fatalf("after a turn the export does not start with the imported file:\n%s", out.Bytes())
	}
	added := strings.Split(strings.TrimSuffix(strings.TrimPrefix(out.String(), string(data)), "\n"), "\n")
	if len(added) < 2 || !strings.HasPrefix(added[0], `{"type":"message","id":"`) || !strings.Contains(added[0], `,"parentId":"f1","timestamp":"`) ||
		!strings.Contains(added[0], `"message":{"role":"user","content":"<b>Tom & Jerry</b>","timestamp":`) {
		t.Fatalf("the turn's lines:\n%s", strings.Join(added, "\n"))
	}
	for _, l := range added {
		if !json.Valid([]byte(l)) || strings.Contains(l, `\u003c`) {
			t.Fatalf("line %s", l)
		}
	}

	// Hostile: nested deeper than the bound.
	deep := `{"type":"session","version":3,"id":"d","timestamp":"2026-01-01T00:00:00.000Z"}` + "\n" +
		`{"type":"custom","customType":"x","data":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"id":"c","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z"}` + "\n"
	if err := c.Import(ctx, "import:deep", strings.NewReader(deep)); err == nil || !strings.Contains(err.Error(), "nests 101 deep") {
		t.Fatalf("deep import: %v", err)
	}
	if h, err := c.History(ctx, "import:deep"); err != nil || len(h) != 0 {
		t.Fatalf("after a refused import: %d entries, %v", len(h), err)
	}
}

func sortedKeys(m map[string][]byte) []string {
	return slices.Sorted(maps.Keys(m))
}
