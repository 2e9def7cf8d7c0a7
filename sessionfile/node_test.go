package sessionfile

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/internal/mustrun"
)

// TestStringifyMatchesNode compares stringify with JavaScript itself on the
// JSON seeds and the fuzz corpus, when node is installed.
func TestStringifyMatchesNode(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if testing.Short() {
		t.Skip("compares with node")
	}
	if err != nil {
		mustrun.Skip(t, mustrun.Node, "node not installed")
	}
	inputs := append([]string(nil), jsonSeeds...)
	for _, dir := range []string{"testdata/fuzz/FuzzParseJSON", "testdata/fuzz/FuzzRead"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, f := range files {
			raw, _ := os.ReadFile(f)
			_, body, _ := strings.Cut(string(raw), "\n")
			body = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(body), "[]byte("), ")")
			if s, err := strconv.Unquote(body); err == nil {
				inputs = append(inputs, strings.Split(s, "\n")...)
			}
		}
	}
	// Node reads one JSON-quoted input per line and answers with the
	// JSON-quoted output or null when JSON.parse throws.
	var in bytes.Buffer
	for _, s := range inputs {
		q, _ := json.Marshal(s)
		in.Write(q)
		in.WriteByte('\n')
	}
	script := `const lines = require('fs').readFileSync(0, 'utf8').split('\n').filter(Boolean);
for (const l of lines) { let out = null; try { out = JSON.stringify(JSON.parse(JSON.parse(l))); } catch {} console.log(JSON.stringify(out)); }`
	cmd := exec.CommandContext(t.Context(), node, "-e", script)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	answers := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(answers) != len(inputs) {
		t.Fatalf("node answered %d of %d inputs", len(answers), len(inputs))
	}
	for i, s := range inputs {
		var want *string
		if err := json.Unmarshal([]byte(answers[i]), &want); err != nil {
			t.Fatal(err)
		}
		// Lines JavaScript reads with invalid UTF-8 differ before parsing.
		if !utf8Valid(s) {
			continue
		}
		var buf bytes.Buffer
		err := stringify(&buf, []byte(s))
		switch {
		case want == nil && err == nil:
			t.Errorf("%q: JavaScript rejects it, stringify gave %s", s, buf.String())
		case want != nil && err != nil:
			t.Errorf("%q: JavaScript accepts it, stringify: %v", s, err)
		case want != nil && buf.String() != *want:
			t.Errorf("%q:\n got  %s\n want %s", s, buf.String(), *want)
		}
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\ufffd") == s }
