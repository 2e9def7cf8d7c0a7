package agentprompt

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func contextNames(files []ContextFile) []string {
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	return names
}

// TestLoadContextFilesFixture loads testdata/workspace: AGENTS.md, SOUL.md,
// TOOLS.md and MEMORY.md exist, IDENTITY.md is empty and USER.md links out
// of the workspace.
func TestLoadContextFilesFixture(t *testing.T) {
	t.Parallel()
	ws := testdata(t, "workspace")
	files, warns := LoadContextFiles(ws, ContextOptions{})
	want := []ContextFile{
		{Name: "AGENTS.md", Path: filepath.Join(ws, "AGENTS.md"), Content: "# AGENTS.md\n\nBe careful with the production database."},
		{Name: "SOUL.md", Path: filepath.Join(ws, "SOUL.md"), Content: "You are calm and precise."},
		{Name: "TOOLS.md", Path: filepath.Join(ws, "TOOLS.md"), Content: "- The deploy script is `./deploy.sh`."},
		{Name: "MEMORY.md", Path: filepath.Join(ws, "MEMORY.md"), Content: "- 2026-02-20: the user prefers short answers."},
	}
	if !slices.Equal(files, want) {
		t.Errorf("files:\n got %+v\nwant %+v", files, want)
	}
	// Missing files are silent; the escaping link is not.
	warningsMatch(t, warns, map[string]string{"workspace/USER.md": "context file skipped: path escapes from parent"})
}

// TestLoadContextFilesMarkMissing checks the reference's [MISSING] entries:
// for files that do not exist or cannot be read, never for the memory files.
func TestLoadContextFilesMarkMissing(t *testing.T) {
	t.Parallel()
	ws := testdata(t, "workspace")
	files, _ := LoadContextFiles(ws, ContextOptions{MarkMissing: true})
	if got, want := contextNames(files), []string{"AGENTS.md", "SOUL.md", "TOOLS.md", "USER.md", "HEARTBEAT.md", "BOOTSTRAP.md", "MEMORY.md"}; !slices.Equal(got, want) {
		t.Fatalf("names = %v, want %v", got, want)
	}
	for _, f := range files[3:6] {
		if !f.Missing || f.Content != "[MISSING] Expected at: "+f.Path {
			t.Errorf("%s: %+v", f.Name, f)
		}
	}
}

func TestLoadContextFilesOptions(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{
		"AGENTS.md":        "agents",
		"TOOLS.md":         "tools",
		"SOUL.md":          "soul",
		"docs/EXTRA.md":    "extra",
		"../outside.md":    "outside",
		"memory.md":        "lower-case memory",
		"MEMORY.md":        "upper-case memory",
		"HEARTBEAT.md":     "  \n\t\n", // only white space: left out
		"big/BOOTSTRAP.md": strings.Repeat("x", 101),
	})
	tests := []struct {
		name      string
		opts      ContextOptions
		wantNames []string
		wantWarns map[string]string
	}{
		{
			// On a case-sensitive file system MEMORY.md and memory.md are
			// two files, and both are loaded.
			name:      "defaults",
			wantNames: []string{"AGENTS.md", "SOUL.md", "TOOLS.md", "MEMORY.md", "memory.md"},
		},
		{
			name:      "a sub-agent's list",
			opts:      ContextOptions{Names: []string{AgentsFile, ToolsFile}},
			wantNames: []string{"AGENTS.md", "TOOLS.md"},
		},
		{
			name:      "paths inside the workspace; never outside",
			opts:      ContextOptions{Names: []string{"docs/EXTRA.md", "../outside.md", "/etc/passwd", filepath.Join(ws, "AGENTS.md")}},
			wantNames: []string{"docs/EXTRA.md"},
			wantWarns: map[string]string{
				"outside.md": "not inside the workspace",
				"etc/passwd": "not inside the workspace",
				"AGENTS.md":  "not inside the workspace",
			},
		},
		{
			name:      "too many bytes",
			opts:      ContextOptions{Names: []string{"big/BOOTSTRAP.md", "SOUL.md"}, MaxFileBytes: 100},
			wantNames: []string{"SOUL.md"},
			wantWarns: map[string]string{"big/BOOTSTRAP.md": "file is 101 bytes (limit 100)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files, warns := LoadContextFiles(ws, tc.opts)
			if got := contextNames(files); !slices.Equal(got, tc.wantNames) {
				t.Errorf("names = %v, want %v", got, tc.wantNames)
			}
			warningsMatch(t, warns, tc.wantWarns)
		})
	}
}

// TestLoadContextFilesSameFile checks that two names for one file (a hard
// link here; on macOS, MEMORY.md and memory.md) give one entry.
func TestLoadContextFilesSameFile(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"MEMORY.md": "memory"})
	if err := os.Link(filepath.Join(ws, "MEMORY.md"), filepath.Join(ws, "memory.md")); err != nil {
		t.Skip("hard links unsupported:", err)
	}
	// A symbolic link inside the workspace is followed.
	if err := os.Symlink("MEMORY.md", filepath.Join(ws, "AGENTS.md")); err != nil {
		t.Fatal(err)
	}
	files, warns := LoadContextFiles(ws, ContextOptions{})
	if got := contextNames(files); !slices.Equal(got, []string{"AGENTS.md"}) || len(warns) != 0 {
		t.Errorf("names = %v, warnings %v; want [AGENTS.md] alone", got, warns)
	}
}

func TestLoadContextFilesNotRegular(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, "AGENTS.md"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"AGENTS.md": "not a regular file"}
	if runtime.GOOS != "windows" {
		// A FIFO must not block the loader.
		if err := syscall.Mkfifo(filepath.Join(ws, "SOUL.md"), 0o644); err != nil {
			t.Fatal(err)
		}
		want["SOUL.md"] = "not a regular file"
	}
	files, warns := LoadContextFiles(ws, ContextOptions{})
	if len(files) != 0 {
		t.Errorf("files = %+v", files)
	}
	warningsMatch(t, warns, want)
}

func TestLoadContextFilesWorkspace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ ws, warn string }{
		{"relative/ws", "not an absolute path"},
		{filepath.Join(t.TempDir(), "missing"), "workspace unreadable"},
	} {
		files, warns := LoadContextFiles(tc.ws, ContextOptions{})
		if files != nil || len(warns) != 1 || !strings.Contains(warns[0].Message, tc.warn) {
			t.Errorf("%s: files %v, warnings %v; want one containing %q", tc.ws, files, warns, tc.warn)
		}
	}
}

// numbered returns n characters of lines that say where they are, so that
// a cut shows which part was kept.
func numbered(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %05d\n", i)
	}
	return b.String()[:n]
}

// TestLoadContextFilesLimits checks trimming against the reference's
// numbers: per file 20 000 characters as 70 % head + 20 % tail around a
// marker, 150 000 in total, nothing added below 64 remaining.
func TestLoadContextFilesLimits(t *testing.T) {
	t.Parallel()
	long := numbered(25_000)
	marker := func(name string, head, tail, total int) string {
		return fmt.Sprintf("\n\n[...truncated, read %s for full content...]\n…(truncated %s: kept %d+%d chars of %d)…\n\n", name, name, head, tail, total)
	}
	tests := []struct {
		name  string
		files map[string]string // AGENTS.md, SOUL.md, TOOLS.md
		opts  ContextOptions
		want  []ContextFile // Name, Content and Truncated only
		warns map[string]string
	}{
		{
			name:  "exactly at the limit",
			files: map[string]string{"AGENTS.md": strings.Repeat("a", 20_000)},
			want:  []ContextFile{{Name: "AGENTS.md", Content: strings.Repeat("a", 20_000)}},
		},
		{
			// Trailing white space does not count and is dropped.
			name:  "trailing white space",
			files: map[string]string{"AGENTS.md": strings.Repeat("a", 20_000) + "\n\n \t\n"},
			want:  []ContextFile{{Name: "AGENTS.md", Content: strings.Repeat("a", 20_000)}},
		},
		{
			name:  "over the limit: head 70 %, marker, tail 20 %",
			files: map[string]string{"AGENTS.md": long},
			want: []ContextFile{{Name: "AGENTS.md", Truncated: true,
				Content: long[:14_000] + marker("AGENTS.md", 14_000, 4_000, 25_000) + long[25_000-4_000:]}},
			warns: map[string]string{"AGENTS.md": "context file is 25000 characters (limit 20000); truncated"},
		},
		{
			// Characters are UTF-16 code units: 12 000 emoji are 24 000.
			name:  "limits in UTF-16 code units",
			files: map[string]string{"AGENTS.md": strings.Repeat("🦞", 12_000)},
			want: []ContextFile{{Name: "AGENTS.md", Truncated: true,
				Content: strings.Repeat("🦞", 7_000) + marker("AGENTS.md", 14_000, 4_000, 24_000) + strings.Repeat("🦞", 2_000)}},
			warns: map[string]string{"AGENTS.md": "context file is 24000 characters (limit 20000)"},
		},
		{
			// An odd limit cuts inside a surrogate pair; the cut moves so
			// that no half emoji is kept.
			name:  "cuts never split a surrogate pair",
			files: map[string]string{"AGENTS.md": strings.Repeat("🦞", 100)},
			// 105 gives a head of 73 and a tail of 21 code units: 36 and 10
			// emoji.
			opts: ContextOptions{MaxFileChars: 105},
			want: []ContextFile{{Name: "AGENTS.md", Truncated: true,
				Content: strings.Repeat("🦞", 36) + marker("AGENTS.md", 73, 21, 200) + strings.Repeat("🦞", 10)}},
			warns: map[string]string{"AGENTS.md": "limit 105"},
		},
		{
			// 100 + 100 leave 50 of 250, under the 64 minimum: TOOLS.md is
			// not added.
			name:  "total budget",
			files: map[string]string{"AGENTS.md": strings.Repeat("a", 100), "SOUL.md": strings.Repeat("s", 100), "TOOLS.md": "t"},
			opts:  ContextOptions{MaxFileChars: 100, MaxTotalChars: 250},
			want:  []ContextFile{{Name: "AGENTS.md", Content: strings.Repeat("a", 100)}, {Name: "SOUL.md", Content: strings.Repeat("s", 100)}},
			warns: map[string]string{"TOOLS.md": "context budget has 50 characters left (< 64)"},
		},
		{
			// 100 leave 70 of 170: SOUL.md gets a 70-character limit, is
			// trimmed (49 + marker + 14), then clamped to 69 + "…".
			name:  "the last file is clamped to what is left",
			files: map[string]string{"AGENTS.md": strings.Repeat("a", 100), "SOUL.md": strings.Repeat("s", 100), "TOOLS.md": "t"},
			opts:  ContextOptions{MaxFileChars: 100, MaxTotalChars: 170},
			want: []ContextFile{
				{Name: "AGENTS.md", Content: strings.Repeat("a", 100)},
				{Name: "SOUL.md", Content: strings.Repeat("s", 49) + (marker("SOUL.md", 49, 14, 100))[:20] + "…", Truncated: true},
			},
			warns: map[string]string{"SOUL.md": "context file is 100 characters (limit 70)"},
		},
		{
			// The total defaults to max(MaxFileChars, 150 000).
			name:  "a per-file limit above the default total",
			files: map[string]string{"AGENTS.md": strings.Repeat("a", 160_000)},
			opts:  ContextOptions{MaxFileChars: 200_000},
			want:  []ContextFile{{Name: "AGENTS.md", Content: strings.Repeat("a", 160_000)}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			writeFiles(t, ws, tc.files)
			tc.opts.Names = []string{AgentsFile, SoulFile, ToolsFile}
			files, warns := LoadContextFiles(ws, tc.opts)
			for i := range files {
				files[i].Path = ""
			}
			if !slices.Equal(files, tc.want) {
				t.Errorf("files differ:\n got %s\nwant %s", describe(files), describe(tc.want))
			}
			warningsMatch(t, warns, tc.warns)
		})
	}
}

// describe summarises context files for a failure message.
func describe(files []ContextFile) string {
	var b strings.Builder
	for _, f := range files {
		c := f.Content
		if len(c) > 300 {
			c = c[:150] + " ... " + c[len(c)-150:]
		}
		fmt.Fprintf(&b, "\n  %s truncated=%t missing=%t len=%d %q", f.Name, f.Truncated, f.Missing, len(f.Content), c)
	}
	return b.String()
}

func TestClampToBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		budget int
		want   string
	}{
		{"abcdef", 0, ""},
		{"abcdef", -1, ""},
		{"abcdef", 6, "abcdef"},
		{"abcdef", 3, "abc"},  // no room for an ellipsis
		{"abcdef", 4, "abc…"}, // budget-1 characters and "…"
		{"🦞🦞🦞", 4, "🦞…"},      // a pair is not split: one code unit less
		{"a🦞", 2, "a"},
	} {
		if got := clampToBudget(tc.in, tc.budget); got != tc.want {
			t.Errorf("clampToBudget(%q, %d) = %q, want %q", tc.in, tc.budget, got, tc.want)
		}
	}
}
