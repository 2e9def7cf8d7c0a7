package agentprompt

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// testdata returns the absolute path of testdata/elem.
func testdata(t testing.TB, elem ...string) string {
	t.Helper()
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{dir}, elem...)...)
}

// portable replaces the absolute testdata path in s by "/testdata", so that
// goldens do not depend on where the repository is checked out.
func portable(t testing.TB, s string) string {
	t.Helper()
	return strings.ReplaceAll(s, testdata(t), "/testdata")
}

// checkGolden compares got with testdata/name, or rewrites the file with
// -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// writeFiles creates files (path relative to dir → content) under dir,
// with their parent directories.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// skillMD returns a SKILL.md with the given frontmatter lines.
func skillMD(lines ...string) string {
	return "---\n" + strings.Join(lines, "\n") + "\n---\n\n# Body\n"
}

// warningsMatch reports whether each want (path suffix → message substring)
// is matched by one warning and every warning by one want.
func warningsMatch(t *testing.T, got []Warning, want map[string]string) {
	t.Helper()
	matched := make(map[string]bool)
	for _, w := range got {
		ok := false
		for suffix, msg := range want {
			if strings.HasSuffix(w.Path, suffix) && strings.Contains(w.Message, msg) {
				matched[suffix], ok = true, true
			}
		}
		if !ok {
			t.Errorf("unexpected warning: %s", w)
		}
	}
	for suffix, msg := range want {
		if !matched[suffix] {
			t.Errorf("missing warning for %s containing %q; got %v", suffix, msg, got)
		}
	}
}
