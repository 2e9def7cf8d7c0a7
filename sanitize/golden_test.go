package sanitize

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestPrepareGolden")

// TestPrepareGolden runs a realistic history (compaction, inter-session
// message, legacy and malformed tool calls, displaced and orphaned results,
// an errored turn) through Prepare for several targets and compares the
// final stage with testdata/golden/<target>.golden. Run with -update after a
// deliberate change and review the diff.
func TestPrepareGolden(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/golden/history.json")
	if err != nil {
		t.Fatal(err)
	}
	msgs := parse(t, string(data))
	for _, tg := range [][3]string{
		{"anthropic", "anthropic-messages", "claude-opus-4-6"},
		{"google", "google-generative-ai", "gemini-2.5-pro"},
		{"openai", "openai-responses", "gpt-5.2"},
		{"mistral", "openai-completions", "mistral-large-latest"},
	} {
		t.Run(tg[0], func(t *testing.T) {
			t.Parallel()
			res := Prepare(Request{Provider: tg[0], API: tg[1], ModelID: tg[2], Messages: msgs, Now: testNow,
				AllowedToolNames: []string{"exec", "read"}})
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(map[string]any{"final": res.Final, "appended": res.Appended}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", tg[0]+".golden")
			if *update {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("final stage differs from %s (run with -update and review the diff):\n%s", path, buf.Bytes())
			}
		})
	}
}
