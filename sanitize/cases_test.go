package sanitize

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/lanefleet/lanefleet/internal/conformance"
)

type historyCase struct {
	name string
	req  Request
}

// historyInputs returns the requests of sanitize-history.json, for tests and
// fuzz seeds beyond the conformance comparison.
func historyInputs(t testing.TB) []historyCase {
	t.Helper()
	var out []historyCase
	for _, c := range conformance.Load(t, "sanitize-history") {
		in, _ := conformance.Decode(t, c.Input).(map[string]any)
		out = append(out, historyCase{name: c.Name, req: Request{
			Provider: str(in["provider"]), API: str(in["modelApi"]), ModelID: str(in["modelId"]),
			Messages: toPiMessages(t, in["messages"]), Now: conformance.Now,
		}})
	}
	return out
}

// transcriptSeeds returns the message arrays of every conformance file this
// package runs, as pi JSON.
func transcriptSeeds(t testing.TB) [][]byte {
	t.Helper()
	var seeds [][]byte
	for _, file := range []string{"sanitize-history", "pairing-repair", "tool-call-input-repair", "turn-validation", "limit-history-turns", "tool-call-id"} {
		data, err := os.ReadFile(filepath.Join(conformance.Dir(), file+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var cases []conformance.Case
		if err := json.Unmarshal(data, &cases); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			in, _ := conformance.Decode(t, c.Input).(map[string]any)
			if in["messages"] == nil {
				continue
			}
			b, err := json.Marshal(toPiMessages(t, in["messages"]))
			if err != nil {
				t.Fatal(err)
			}
			seeds = append(seeds, b)
		}
	}
	return seeds
}
