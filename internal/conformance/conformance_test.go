package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestVendoredCopyMatchesShared: testdata/conformance is a copy of the
// shared reference cases (../shared/conformance next to the repository, or
// $LANEFLEET_SHARED_CONFORMANCE_DIR): a case changed on one side only would
// let the suite pass against stale expectations. Skipped where the shared
// cases are absent, as in CI.
func TestVendoredCopyMatchesShared(t *testing.T) {
	t.Parallel()
	upstream := os.Getenv("LANEFLEET_SHARED_CONFORMANCE_DIR")
	if upstream == "" {
		upstream = filepath.Join(moduleRoot(), "..", "shared", "conformance")
	}
	if _, err := os.Stat(upstream); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no shared conformance cases at %s", upstream)
	}
	if err := compareDirs(vendored(), upstream); err != nil {
		t.Fatalf("testdata/conformance differs from %s (copy the shared files over):\n%v", upstream, err)
	}
}

// compareDirs reports every difference between a vendored copy and the
// upstream directory it copies: a file missing or different in the copy, or
// a file only the copy has (its own DEVIATIONS excepted).
func compareDirs(vendored, upstream string) error {
	var errs []error
	up, err := os.ReadDir(upstream)
	if err != nil {
		return err
	}
	seen := map[string]bool{"DEVIATIONS": true}
	for _, e := range up {
		if e.IsDir() {
			continue
		}
		seen[e.Name()] = true
		want, err := os.ReadFile(filepath.Join(upstream, e.Name()))
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(vendored, e.Name()))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("%s: missing from the copy", e.Name()))
		case err != nil:
			return err
		case !bytes.Equal(got, want):
			errs = append(errs, fmt.Errorf("%s: differs", e.Name()))
		}
	}
	own, err := os.ReadDir(vendored)
	if err != nil {
		return err
	}
	for _, e := range own {
		if !e.IsDir() && !seen[e.Name()] {
			errs = append(errs, fmt.Errorf("%s: only in the copy", e.Name()))
		}
	}
	return errors.Join(errs...)
}

func TestCompareDirs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		vendored, upst map[string]string
		want           []string // substrings of the error, none = equal
	}{
		{"equal, with the copy's own DEVIATIONS", map[string]string{"a.json": "[1]", "DEVIATIONS": "x"}, map[string]string{"a.json": "[1]"}, nil},
		{"content differs", map[string]string{"a.json": "[1]"}, map[string]string{"a.json": "[2]"}, []string{"a.json: differs"}},
		{"missing from the copy", map[string]string{}, map[string]string{"a.json": "[1]"}, []string{"a.json: missing"}},
		{"only in the copy", map[string]string{"a.json": "[1]", "b.json": "[]"}, map[string]string{"a.json": "[1]"}, []string{"b.json: only in the copy"}},
		{"every difference is reported", map[string]string{"a.json": "[1]", "c.json": "[]"}, map[string]string{"a.json": "[2]", "b.json": "[]"},
			[]string{"a.json: differs", "b.json: missing", "c.json: only in the copy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, u := writeDir(t, tt.vendored), writeDir(t, tt.upst)
			err := compareDirs(v, u)
			if (err != nil) != (len(tt.want) > 0) {
				t.Fatalf("err = %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q lacks %q", err, w)
				}
			}
		})
	}
}

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadFailsWithoutCases: a missing file, an unreadable one and one
// without cases are errors, never an empty suite that passes.
func TestLoadFailsWithoutCases(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{"empty.json": "[]", "bad.json": "{", "ok.json": `[{"name":"x","input":{},"expected":{}}]`})
	for _, file := range []string{"missing", "empty", "bad.json"} {
		if _, err := load(dir, file); err == nil {
			t.Errorf("%s: no error", file)
		}
	}
	if _, err := load(filepath.Join(dir, "nowhere"), "ok"); err == nil {
		t.Error("missing directory: no error")
	}
	if cs, err := load(dir, "ok.json"); err != nil || len(cs) != 1 {
		t.Errorf("ok: %v %v", cs, err)
	}
}

// runCall finds the case files a test runs.
var runCall = regexp.MustCompile(`conformance\.(?:Run|Load)\(t, "([^"]+)"`)

// TestEveryFileIsRun: each case file of testdata/conformance is run by a
// package's test; a file nobody runs is a suite that cannot fail.
func TestEveryFileIsRun(t *testing.T) {
	t.Parallel()
	run := map[string]bool{}
	err := filepath.WalkDir(moduleRoot(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != moduleRoot() {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range runCall.FindAllStringSubmatch(string(src), -1) {
			run[strings.TrimSuffix(m[1], ".json")] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(vendored(), "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no case files in %s: %v", vendored(), err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".json"); !run[name] {
			t.Errorf("%s.json is run by no test (conformance.Run(t, %q, …))", name, name)
		}
	}
}

// TestDeviationsNameCases: every line of DEVIATIONS names an existing case,
// so a renamed case cannot leave a stale skip behind (or a typo skip
// nothing).
func TestDeviationsNameCases(t *testing.T) {
	t.Parallel()
	devs := map[string]string{}
	readDeviations(filepath.Join(vendored(), "DEVIATIONS"), devs)
	if len(devs) == 0 {
		t.Fatal("no deviations read")
	}
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		file, cs, ok := strings.Cut(name, "/")
		if !ok {
			t.Errorf("%q: not <file>/<case>", name)
			continue
		}
		cases, err := load(vendored(), file)
		if err != nil {
			t.Errorf("%q: %v", name, err)
			continue
		}
		if !slices.ContainsFunc(cases, func(c Case) bool { return c.Name == cs }) {
			t.Errorf("%q: no such case", name)
		}
		if devs[name] == "" {
			t.Errorf("%q: no reason given", name)
		}
	}
}

// TestJSErrorStatus: a case error's HTTP status is its status or its
// statusCode, a number or a string of digits (runtime spec §15).
func TestJSErrorStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int
	}{
		{`{"status":429}`, 429},
		{`{"status":"402"}`, 402},
		{`{"statusCode":503}`, 503},
		{`{"statusCode":"401"}`, 401},
		{`{"status":"abc","statusCode":"408"}`, 408},
		{`{"status":"4o4"}`, 0},
		{`{}`, 0},
	}
	for _, tt := range tests {
		var e JSError
		if err := json.Unmarshal([]byte(tt.in), &e); err != nil {
			t.Fatal(err)
		}
		if got := e.status(); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.in, got, tt.want)
		}
	}
}
