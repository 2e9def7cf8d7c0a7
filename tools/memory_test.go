package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func memoryFixture(t *testing.T, cache *MemoryCache) (*fixture, List) {
	t.Helper()
	f := newFixture(t)
	mem, err := Memory(Workspace{Dir: f.dir}, cache)
	if err != nil {
		t.Fatal(err)
	}
	f.tools = append(f.tools, mem...)
	return f, mem
}

// TestMemorySearch: the best chunks of MEMORY.md and memory/**/*.md come
// back with their lines; other files, symbolic links out and files
// outside the workspace are never searched; a changed file is searched
// anew through the cache.
func TestMemorySearch(t *testing.T) {
	t.Parallel()
	cache := NewMemoryCache()
	f, _ := memoryFixture(t, cache)
	f.file("MEMORY.md", "# Preferences\nThe user likes green tea.\n\n# Stack\nDatabase: Postgres 16\n")
	f.file("memory/2026-11-28.md", "# Standup\nDiscussed the postgres migration.\n")
	f.file("memory/deep/a/b.md", "postgres deep note\n")
	f.file("notes.md", "postgres outside memory\n")
	f.file("memory/data.txt", "postgres in a txt\n")
	f.symlink(filepath.Join(f.outside, "secret.txt"), "memory/secret.md")
	os.WriteFile(filepath.Join(f.outside, "secret.txt"), []byte("postgres "+secret+"\n"), 0o644)

	res := f.mustCall("memory_search", map[string]any{"query": "Postgres"})
	text := res.Content[0].Text
	for _, want := range []string{"MEMORY.md:4-5", "memory/2026-11-28.md:1-2", "memory/deep/a/b.md:1-1"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s: %q", want, text)
		}
	}
	for _, not := range []string{"notes.md", "data.txt", secret} {
		if strings.Contains(text, not) {
			t.Errorf("searched %s: %q", not, text)
		}
	}
	rows := res.Details["results"].([]any)
	if len(rows) != 3 || rows[0].(map[string]any)["path"] != "memory/deep/a/b.md" {
		t.Errorf("ranking: %v", rows)
	}
	if r := f.mustCall("memory_search", map[string]any{"query": "postgres", "maxResults": 1}); len(r.Details["results"].([]any)) != 1 {
		t.Errorf("maxResults: %v", r.Details)
	}
	if r := f.mustCall("memory_search", map[string]any{"query": "kubernetes"}); !strings.Contains(r.Content[0].Text, "No memory matches.") {
		t.Errorf("no match: %q", r.Content[0].Text)
	}
	// Changed (another size): found anew.
	f.file("MEMORY.md", "# Preferences\nThe user now prefers kubernetes.\n")
	if r := f.mustCall("memory_search", map[string]any{"query": "kubernetes"}); !strings.Contains(r.Content[0].Text, "MEMORY.md:1-2") {
		t.Errorf("after a change: %q", r.Content[0].Text)
	}
}

// TestMemoryGet: lines of a memory file; a missing one is empty, not an
// error; other files and paths out of the workspace are refused.
func TestMemoryGet(t *testing.T) {
	t.Parallel()
	f, _ := memoryFixture(t, nil)
	f.file("MEMORY.md", "one\ntwo\nthree\nfour\n")
	f.file("memory/x.md", "x1\nx2\n")
	f.file("other.md", "not memory\n")
	res := f.mustCall("memory_get", map[string]any{"path": "MEMORY.md", "from": 2, "lines": 2})
	if got := res.Content[0].Text; got != "two\nthree\n\n[lines 2-3 of 4; from=4 continues]" {
		t.Errorf("range: %q", got)
	}
	if got := f.mustCall("memory_get", map[string]any{"path": "memory/x.md"}).Content[0].Text; got != "x1\nx2" {
		t.Errorf("whole: %q", got)
	}
	res = f.mustCall("memory_get", map[string]any{"path": "memory/2030-01-01.md"})
	if res.IsError || res.Details["missing"] != true || !strings.Contains(res.Content[0].Text, "does not exist yet") {
		t.Errorf("missing: %+v", res)
	}
	f.symlink(filepath.Join(f.outside, "secret.txt"), "memory/link.md")
	cases := []struct {
		args map[string]any
		want string
	}{
		{nil, `missing required argument "path"`},
		{map[string]any{"path": "other.md"}, "is not a memory file"},
		{map[string]any{"path": "memory/../other.md"}, "is not a memory file"},
		{map[string]any{"path": "memory/x.txt"}, "is not a memory file"},
		{map[string]any{"path": "../outside/secret.txt"}, "escapes the workspace"},
		{map[string]any{"path": filepath.Join(f.outside, "MEMORY.md")}, "outside the workspace"},
		{map[string]any{"path": "memory/link.md"}, "resolves outside the workspace"},
		{map[string]any{"path": "MEMORY.md\x00"}, "NUL"},
		{map[string]any{"path": "MEMORY.md", "from": 0}, "from must be"},
		{map[string]any{"path": "MEMORY.md", "from": 99}, "beyond the end"},
		{map[string]any{"path": "MEMORY.md", "lines": -3}, "lines must be"},
		{map[string]any{"path": "MEMORY.md", "lines": "many"}, "must be a number"},
		{map[string]any{"path": "memory/a/b/c/d/e/f.md"}, "is not a memory file"},
	}
	for _, c := range cases {
		_, err := f.call("memory_get", c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestMemorySearchArgs: hostile queries and counts are refused.
func TestMemorySearchArgs(t *testing.T) {
	t.Parallel()
	f, _ := memoryFixture(t, nil)
	cases := []struct {
		args map[string]any
		want string
	}{
		{nil, `missing required argument "query"`},
		{map[string]any{"query": 3}, "must be a string"},
		{map[string]any{"query": "   ...  "}, "no words"},
		{map[string]any{"query": strings.Repeat("word ", 1000)}, "keep it under"},
		{map[string]any{"query": "tea", "maxResults": 0}, "maxResults must be"},
		{map[string]any{"query": "tea", "maxResults": 2.5}, "whole number"},
		{map[string]any{"query": "tea", "minScore": "high"}, "must be a number"},
	}
	for _, c := range cases {
		_, err := f.call("memory_search", c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60v: %v, want %q", c.args, err, c.want)
		}
	}
	// A large memory file is searched in its first MemoryFileBytes only.
	f.file("MEMORY.md", strings.Repeat("filler line here\n", MemoryFileBytes/17+10)+"needle at the end\n")
	res, err := f.callCtx(context.Background(), "memory_search", map[string]any{"query": "needle"})
	if err != nil || !strings.Contains(res.Content[0].Text, "only the first 1.0MB of MEMORY.md searched") {
		t.Errorf("big file: %v %v", err, res.Content)
	}
}

// BenchmarkMemorySearchTool: a memory_search call over 100 memory files of
// 100 chunks each (10,000 chunks), indexed once and then served from the
// cache: what a turn pays per search.
func BenchmarkMemorySearchTool(b *testing.B) {
	dir := b.TempDir()
	words := strings.Fields("budget meeting postgres migration deploy fleet lanes tenant invoice customer release incident review design tea coffee travel")
	for f := range 100 {
		var sb strings.Builder
		for i := range 100 {
			fmt.Fprintf(&sb, "# Note %d\n", i)
			for j := range 6 {
				fmt.Fprintf(&sb, "%s %s item%d %s\n", words[(f+i+j)%len(words)], words[(i*7+j)%len(words)], i, words[(i*3+j*5+f)%len(words)])
			}
		}
		p := filepath.Join(dir, "memory", fmt.Sprintf("%03d.md", f))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	mem, err := Memory(Workspace{Dir: dir}, NewMemoryCache())
	if err != nil {
		b.Fatal(err)
	}
	search, _ := mem.Lookup("memory_search")
	call := Call{Args: map[string]any{"query": "postgres migration incident"}}
	res, err := search.Call(context.Background(), call)
	if err != nil || res.Details["chunks"].(int64) < 10000 {
		b.Fatalf("%v %v", err, res.Details["chunks"])
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := search.Call(context.Background(), call); err != nil {
			b.Fatal(err)
		}
	}
}
