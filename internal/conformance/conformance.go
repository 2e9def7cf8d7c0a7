// Package conformance loads the reference runtime's conformance cases (see
// testdata/conformance/README.md) and runs them as subtests named
// "<file>/<case>". Each package that implements a piece of pure logic has a
// TestConformance that calls Run for its files, so `go test -run Conformance
// ./...` runs them all.
//
// The directory is $LANEFLEET_CONFORMANCE_DIR when set, else the module's
// testdata/conformance; a missing directory, file or an empty file fails the
// test. Cases named in its DEVIATIONS file are skipped with the recorded
// reason; the owning package's own tests cover the fixed behaviour. The
// package's own tests check that every case file is run by some package,
// that every deviation names a case, and that the vendored copy equals the
// shared reference cases when those are present.
package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Now is the harness clock, in Unix milliseconds; "$now" in a case stands for it.
const Now int64 = 1750000000000

// Case is one conformance case.
type Case struct {
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	Expected  json.RawMessage `json:"expected"`
	Note      string          `json:"note"`
	Uncertain bool            `json:"uncertain"`
}

// Dir returns the conformance directory.
func Dir() string {
	if d := os.Getenv("LANEFLEET_CONFORMANCE_DIR"); d != "" {
		return d
	}
	return vendored()
}

// vendored is the module's own copy of the cases, testdata/conformance.
func vendored() string { return filepath.Join(moduleRoot(), "testdata", "conformance") }

// moduleRoot is the directory of the module's go.mod.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	devOnce sync.Once
	devs    map[string]string
)

// Deviations returns the deliberate differences: "<file>/<case>" → reason.
// Lines of DEVIATIONS read "<file>/<case name> | <reason>"; blank lines and
// lines starting with # are ignored. The project's copy is always read, and a
// DEVIATIONS file in LANEFLEET_CONFORMANCE_DIR adds to it.
func Deviations() map[string]string {
	devOnce.Do(func() {
		devs = map[string]string{}
		for _, p := range []string{filepath.Join(vendored(), "DEVIATIONS"), filepath.Join(Dir(), "DEVIATIONS")} {
			readDeviations(p, devs)
		}
	})
	return devs
}

func readDeviations(path string, into map[string]string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, _ := strings.Cut(line, " | ")
		into[strings.TrimSpace(name)] = strings.TrimSpace(reason)
	}
}

// Load reads the cases of one file ("sanitize-history", with or without .json).
// A missing directory or file, or a file without cases, fails t: a suite
// that finds nothing to run must not pass.
func Load(t testing.TB, file string) []Case {
	t.Helper()
	cases, err := load(Dir(), file)
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	return cases
}

// LoadFile reads the cases of a file of the same format elsewhere (a
// package's own cases of a vocabulary the shipped ones do not use).
func LoadFile(t testing.TB, path string) []Case {
	t.Helper()
	cases, err := load(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	return cases
}

func load(dir, file string) ([]Case, error) {
	file = strings.TrimSuffix(file, ".json")
	data, err := os.ReadFile(filepath.Join(dir, file+".json"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (LANEFLEET_CONFORMANCE_DIR or testdata/conformance must hold every case file)", file, err)
	}
	var cases []Case
	if err := json.Unmarshal(data, &cases); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("%s: no cases", file)
	}
	return cases, nil
}

// Run runs every case of file as the subtest "<file>/<case name>", skipping
// listed deviations.
func Run(t *testing.T, file string, fn func(t *testing.T, c Case)) {
	t.Helper()
	file = strings.TrimSuffix(file, ".json")
	cases := Load(t, file)
	t.Run(file, func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) {
				if why, ok := Deviations()[file+"/"+c.Name]; ok {
					t.Skipf("deliberate deviation: %s", why)
				}
				fn(t, c)
			})
		}
	})
}

// Decode unmarshals raw JSON with numbers as json.Number, after expanding the
// generated-text descriptions of the README ({"repeat"}, {"lines"},
// {"concat"}). "$now" is left as is: compare with Equal, which knows it.
func Decode(t testing.TB, raw json.RawMessage) any {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("conformance: decode: %v", err)
	}
	return Expand(v)
}

// Expand replaces generated-text descriptions with the text they describe.
func Expand(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if s, ok := expandText(x); ok {
			return s
		}
		for k, e := range x {
			x[k] = Expand(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = Expand(e)
		}
		return x
	}
	return v
}

func expandText(m map[string]any) (string, bool) {
	if len(m) == 2 {
		if r, ok := m["repeat"].(string); ok {
			n, err := toInt(m["count"])
			if err == nil {
				return strings.Repeat(r, n), true
			}
		}
	}
	if len(m) == 1 {
		if l, ok := m["lines"].(map[string]any); ok {
			n, err := toInt(l["count"])
			tmpl, _ := l["template"].(string)
			if err == nil {
				lines := make([]string, n)
				for i := range lines {
					lines[i] = strings.ReplaceAll(tmpl, "{i}", fmt.Sprint(i))
				}
				return strings.Join(lines, "\n"), true
			}
		}
		if parts, ok := m["concat"].([]any); ok {
			var b strings.Builder
			for _, p := range parts {
				switch e := Expand(p).(type) {
				case string:
					b.WriteString(e)
				default:
					return "", false
				}
			}
			return b.String(), true
		}
	}
	return "", false
}

func toInt(v any) (int, error) {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		return int(i), err
	case float64:
		return int(n), nil
	case int:
		return n, nil
	}
	return 0, fmt.Errorf("not a number: %v", v)
}

// Equal compares a result (any JSON-marshalable value) with an expected value
// from Decode, treating numbers by value, "$now" as Now, and reports the first
// difference as a path.
func Equal(got, want any) (bool, string) {
	g := normalizeGot(got)
	return equal(g, want, "$")
}

func normalizeGot(v any) any {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<unmarshalable %T: %v>", v, err)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var out any
	_ = d.Decode(&out)
	return out
}

func equal(got, want any, path string) (bool, string) {
	if s, ok := want.(string); ok && s == "$now" {
		if n, ok := got.(json.Number); ok && n.String() == fmt.Sprint(Now) {
			return true, ""
		}
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false, fmt.Sprintf("%s: got %s, want an object", path, short(got))
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return false, fmt.Sprintf("%s.%s: missing (want %s)", path, k, short(wv))
			}
			if ok, diff := equal(gv, wv, path+"."+k); !ok {
				return false, diff
			}
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return false, fmt.Sprintf("%s.%s: unexpected field = %s", path, k, short(g[k]))
			}
		}
		return true, ""
	case []any:
		g, ok := got.([]any)
		if !ok {
			return false, fmt.Sprintf("%s: got %s, want an array", path, short(got))
		}
		if len(g) != len(w) {
			return false, fmt.Sprintf("%s: got %d items, want %d: got %s", path, len(g), len(w), short(got))
		}
		for i := range w {
			if ok, diff := equal(g[i], w[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return false, diff
			}
		}
		return true, ""
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return false, fmt.Sprintf("%s: got %s, want %s", path, short(got), w)
		}
		gf, _ := g.Float64()
		wf, _ := w.Float64()
		if gf != wf {
			return false, fmt.Sprintf("%s: got %s, want %s", path, g, w)
		}
		return true, ""
	default:
		if fmt.Sprint(got) != fmt.Sprint(want) || (got == nil) != (want == nil) {
			return false, fmt.Sprintf("%s: got %s, want %s", path, short(got), short(want))
		}
		return true, ""
	}
}

func short(v any) string {
	data, _ := json.Marshal(v)
	if len(data) > 300 {
		return string(data[:300]) + "…"
	}
	return string(data)
}

// Check fails t with the first difference between got and want.
func Check(t testing.TB, got, want any) {
	t.Helper()
	if ok, diff := Equal(got, want); !ok {
		t.Errorf("mismatch at %s", diff)
	}
}
