package secretexec

import (
	"strings"
	"testing"
)

// FuzzParse: whatever a command prints, reading it never panics and a
// failure never quotes it (a marker in the output never reaches the
// error), with or without plain values.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"protocolVersion":1,"values":{"k":"SECRETVALUE"}}`, `{"protocolVersion":2,"values":{"k":"SECRETVALUE"}}`,
		`{"protocolVersion":1,"errors":{"k":{"message":"SECRETVALUE"}}}`, `{"protocolVersion":1,"values":{"k":{"SECRETVALUE":1}}}`,
		`{"protocolVersion":1,"values":{"SECRETVALUE":"x"}}`, "SECRETVALUE\n", `{"SECRETVALUE"`, ""} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, out []byte, jsonOnly bool) {
		vals, err := Provider{Name: "vault", JSONOnly: jsonOnly}.parse(out, []string{"k"})
		if err != nil {
			if strings.Contains(string(out), "SECRETVALUE") && strings.Contains(err.Error(), "SECRETVALUE") {
				t.Fatalf("%q: the error quotes the output: %v", out, err)
			}
			return
		}
		if v := vals["k"].Reveal(); v == "" || v != strings.TrimSpace(v) {
			t.Fatalf("%q: value %q", out, v)
		}
	})
}
