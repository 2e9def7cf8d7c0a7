package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools/memsearch"
)

// Bounds of the memory tools.
const (
	// MemoryFileBytes is the most of one memory file that is indexed and
	// read; the rest is left out, with a note.
	MemoryFileBytes = 1 << 20
	// MemoryFiles is the most memory files one search reads.
	MemoryFiles = 1000
	// MemoryBytes is the most bytes one search reads over all files.
	MemoryBytes = 32 << 20
	// memoryDepth bounds the directories below memory/ that are searched.
	memoryDepth = 4
	// defaultMemoryResults and maxMemoryResults: memory_search's count.
	defaultMemoryResults = 5
	maxMemoryResults     = 50
	// snippetBytes caps one result's text.
	snippetBytes = 700
	// maxQueryBytes bounds a query.
	maxQueryBytes = 2000
	// defaultGetLines is what memory_get returns without lines.
	defaultGetLines = 200
	// memoryCacheBytes bounds the text a MemoryCache keeps.
	memoryCacheBytes = 64 << 20
)

// MemoryCache keeps memory files' chunks between calls, keyed by file
// and checked against its size and modification time, so a search reads
// and indexes only what changed. It is shared by every run of a worker
// and safe for concurrent use; its text is bounded (memoryCacheBytes).
type MemoryCache struct {
	mu    sync.Mutex
	files map[string]cachedFile
	bytes int
}

type cachedFile struct {
	size  int64
	mtime time.Time
	file  *memsearch.File
	cut   bool // the file is over MemoryFileBytes
}

// NewMemoryCache returns an empty cache.
func NewMemoryCache() *MemoryCache { return &MemoryCache{files: map[string]cachedFile{}} }

func (c *MemoryCache) get(key string, fi fs.FileInfo) (cachedFile, bool) {
	if c == nil {
		return cachedFile{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.files[key]
	if !ok || e.size != fi.Size() || !e.mtime.Equal(fi.ModTime()) {
		return cachedFile{}, false
	}
	return e, true
}

func (c *MemoryCache) put(key string, e cachedFile) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.files[key]; ok {
		c.bytes -= int(old.size)
	}
	for k, old := range c.files {
		if c.bytes+int(e.size) <= memoryCacheBytes {
			break
		}
		delete(c.files, k)
		c.bytes -= int(old.size)
	}
	c.files[key] = e
	c.bytes += int(e.size)
}

// Memory returns memory_search and memory_get over w's memory files:
// MEMORY.md (or memory.md) and the Markdown files under memory/. cache
// may be nil (every search then reads and indexes the files).
//
//   - memory_search {query, maxResults?, minScore?}: the chunks of the
//     memory files that best match query by BM25 (no embeddings), each
//     with its path, lines and score.
//   - memory_get {path, from?, lines?}: lines of one memory file; a file
//     that does not exist yet is empty text, not an error.
//
// Paths are confined as the file tools' are (os.Root), and only memory
// files can be read: other files have the read tool.
func Memory(w Workspace, cache *MemoryCache) (List, error) {
	v, err := w.validate()
	if err != nil {
		return nil, err
	}
	return List{&memorySearch{w: v, cache: cache}, &memoryGet{w: v}}, nil
}

type memorySearch struct {
	w     *ws
	cache *MemoryCache
}

func (t *memorySearch) Idempotent() bool { return true }

func (t *memorySearch) Spec() provider.Tool {
	return provider.Tool{
		Name: "memory_search",
		Description: "Search your memory files (MEMORY.md and memory/*.md in the workspace) by keywords before answering about prior work, decisions, dates, people, preferences or todos. " +
			"Ranks sections by BM25 keyword relevance (exact words, not meaning: try synonyms if nothing comes back) and returns the best snippets with their path and lines; read more with memory_get.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"query":      map[string]any{"type": "string", "description": "Words to search for"},
				"maxResults": map[string]any{"type": "number", "description": fmt.Sprintf("Most results (default %d, max %d)", defaultMemoryResults, maxMemoryResults)},
				"minScore":   map[string]any{"type": "number", "description": "Leave out results scoring below this (BM25 score, 0 = all)"},
			},
			"required": []any{"query"},
		},
	}
}

func (t *memorySearch) Call(ctx context.Context, call Call) (Result, error) {
	query, _, err := stringArg(call.Args, "query", true)
	if err != nil {
		return Result{}, err
	}
	if len(query) > maxQueryBytes {
		return Result{}, fmt.Errorf("query is %d bytes; keep it under %d (a few keywords)", len(query), maxQueryBytes)
	}
	if len(memsearch.Tokens(query)) == 0 {
		return Result{}, errors.New("query has no words to search for")
	}
	n := int64(defaultMemoryResults)
	switch v, ok, err := intArg(call.Args, "maxResults"); {
	case err != nil:
		return Result{}, err
	case ok && v < 1:
		return Result{}, fmt.Errorf("maxResults must be 1 to %d, got %d", maxMemoryResults, v)
	case ok:
		n = min(v, maxMemoryResults)
	}
	minScore, _, err := numberArg(call.Args, "minScore")
	if err != nil {
		return Result{}, err
	}
	files, notes, err := t.load(ctx)
	if err != nil {
		return Result{}, err
	}
	chunks := 0
	for _, f := range files {
		chunks += len(f.Chunks)
	}
	hits := memsearch.Search(files, query, int(n), minScore)
	var b strings.Builder
	rows := make([]any, 0, len(hits))
	for i, h := range hits {
		snippet, _ := keepStart(h.Text, snippetBytes)
		if i > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "%s:%d-%d (score %.2f)\n%s", h.Path, h.StartLine, h.EndLine, h.Score, snippet)
		rows = append(rows, map[string]any{"path": h.Path, "startLine": int64(h.StartLine), "endLine": int64(h.EndLine), "score": roundScore(h.Score), "snippet": snippet})
	}
	if len(hits) == 0 {
		b.WriteString("No memory matches.")
		if chunks == 0 {
			b.WriteString(" There are no memory files yet (MEMORY.md, memory/*.md).")
		}
	}
	for _, n := range notes {
		b.WriteString("\n\n" + n)
	}
	return Result{Content: []message.Block{message.Text(b.String())}, Details: map[string]any{"results": rows, "chunks": int64(chunks)}}, nil
}

func roundScore(s float64) float64 { return float64(int64(s*1000+0.5)) / 1000 }

// keepStart returns the first limit bytes of s (at a character boundary)
// and whether it cut.
func keepStart(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	i := limit
	for i > 0 && !isRuneStart(s[i]) {
		i--
	}
	return s[:i] + "…", true
}

// load returns the chunks of every memory file, from the cache where a
// file has not changed, and notes on what was left out.
func (t *memorySearch) load(ctx context.Context) ([]*memsearch.File, []string, error) {
	root, err := t.w.openRoot()
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	names, notes := memoryFiles(root)
	var (
		files []*memsearch.File
		read  int64
		cut   []string
	)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("memory_search aborted: %w", err)
		}
		fi, err := root.Lstat(name)
		if err != nil || !fi.Mode().IsRegular() {
			continue // gone since the listing, or not a plain file
		}
		key := t.w.realDir + "\x00" + name
		e, ok := t.cache.get(key, fi)
		if !ok {
			if read+min(fi.Size(), MemoryFileBytes) > MemoryBytes {
				notes = append(notes, fmt.Sprintf("[memory files past %s in all were not searched]", formatSize(MemoryBytes)))
				break
			}
			text, whole, err := readMemoryFile(root, name)
			if err != nil {
				continue
			}
			read += int64(len(text))
			e = cachedFile{size: fi.Size(), mtime: fi.ModTime(), file: memsearch.Split(filepath.ToSlash(name), text), cut: !whole}
			t.cache.put(key, e)
		}
		if e.cut {
			cut = append(cut, filepath.ToSlash(name))
		}
		files = append(files, e.file)
	}
	if len(cut) > 0 {
		notes = append(notes, fmt.Sprintf("[only the first %s of %s searched]", formatSize(MemoryFileBytes), strings.Join(cut, ", ")))
	}
	return files, notes, nil
}

// memoryFiles lists the memory files of the workspace root: MEMORY.md or
// memory.md, then the .md files under memory/ (sorted, at most
// memoryDepth directories down, at most MemoryFiles), never through a
// symbolic link.
func memoryFiles(root *os.Root) (names, notes []string) {
	for _, top := range []string{"MEMORY.md", "memory.md"} {
		if fi, err := root.Lstat(top); err == nil && fi.Mode().IsRegular() {
			names = append(names, top)
			break
		}
	}
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if len(names) >= MemoryFiles {
			return
		}
		f, err := root.Open(dir)
		if err != nil {
			return
		}
		entries, _ := f.ReadDir(MemoryFiles + 1)
		f.Close()
		slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range entries {
			name := path.Join(dir, e.Name())
			switch {
			case len(names) >= MemoryFiles:
				notes = append(notes, fmt.Sprintf("[only the first %d memory files were searched]", MemoryFiles))
				return
			case e.Type().IsRegular() && strings.EqualFold(path.Ext(name), ".md"):
				names = append(names, filepath.FromSlash(name))
			case e.IsDir() && depth < memoryDepth:
				walk(name, depth+1)
			}
		}
	}
	if fi, err := root.Lstat("memory"); err == nil && fi.IsDir() {
		walk("memory", 1)
	}
	return names, notes
}

// readMemoryFile reads at most MemoryFileBytes of name (non-blocking: a
// FIFO put there fails instead of hanging) and reports whether that was
// all of it.
func readMemoryFile(root *os.Root, name string) (string, bool, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", false, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, MemoryFileBytes+1))
	if err != nil {
		return "", false, err
	}
	whole := len(b) <= MemoryFileBytes
	if !whole {
		b = b[:MemoryFileBytes]
		if i := strings.LastIndexByte(string(b), '\n'); i > 0 {
			b = b[:i+1]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), whole, nil
}

type memoryGet struct{ w *ws }

func (t *memoryGet) Idempotent() bool { return true }

func (t *memoryGet) Spec() provider.Tool {
	return provider.Tool{
		Name: "memory_get",
		Description: fmt.Sprintf("Read lines of a memory file (MEMORY.md, or a .md file under memory/), e.g. around a memory_search result. "+
			"from is the first line (1-based, default 1), lines how many (default %d). A memory file that does not exist yet comes back empty.", defaultGetLines),
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"path":  map[string]any{"type": "string", "description": "MEMORY.md or memory/<name>.md"},
				"from":  map[string]any{"type": "number", "description": "First line, 1-based"},
				"lines": map[string]any{"type": "number", "description": "How many lines"},
			},
			"required": []any{"path"},
		},
	}
}

// memoryPath checks that the model's path is a memory file's and returns
// it relative to the workspace.
func (t *memoryGet) memoryPath(p string) (string, error) {
	rel, err := t.w.resolve(p)
	if err != nil {
		return "", err
	}
	slash := filepath.ToSlash(rel)
	switch {
	case slash == "MEMORY.md" || slash == "memory.md":
	case strings.HasPrefix(slash, "memory/") && strings.EqualFold(path.Ext(slash), ".md") && strings.Count(slash, "/") <= memoryDepth:
	default:
		return "", fmt.Errorf("%q is not a memory file: memory_get reads MEMORY.md and the .md files under memory/ (use read for other files)", p)
	}
	return rel, nil
}

func (t *memoryGet) Call(ctx context.Context, call Call) (Result, error) {
	p, _, err := stringArg(call.Args, "path", true)
	if err != nil {
		return Result{}, err
	}
	rel, err := t.memoryPath(p)
	if err != nil {
		return Result{}, err
	}
	from := int64(1)
	switch v, ok, err := intArg(call.Args, "from"); {
	case err != nil:
		return Result{}, err
	case ok && v < 1:
		return Result{}, fmt.Errorf("from must be a line number from 1, got %d", v)
	case ok:
		from = v
	}
	want := int64(defaultGetLines)
	switch v, ok, err := intArg(call.Args, "lines"); {
	case err != nil:
		return Result{}, err
	case ok && v < 1:
		return Result{}, fmt.Errorf("lines must be 1 or more, got %d", v)
	case ok:
		want = v
	}
	want = min(want, int64(t.w.MaxReadLines))
	root, err := t.w.openRoot()
	if err != nil {
		return Result{}, err
	}
	defer root.Close()
	slash := filepath.ToSlash(rel)
	text, whole, err := readMemoryFile(root, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return Result{Content: []message.Block{message.Text(fmt.Sprintf("[%s does not exist yet: nothing remembered there]", slash))},
			Details: map[string]any{"path": slash, "text": "", "missing": true}}, nil
	}
	if err != nil {
		return Result{}, fsError(p, err)
	}
	win, err := readWindow(ctx, strings.NewReader(text), from-1, want, int64(t.w.MaxReadBytes))
	if err != nil {
		return Result{}, fsError(p, err)
	}
	if from > win.total && !(from == 1 && win.total == 0) {
		return Result{}, fmt.Errorf("from %d is beyond the end of %q (%d lines)", from, slash, win.total)
	}
	last := from + win.lines - 1
	body := win.text
	if win.total == 0 {
		body = "[empty file]"
	}
	if last < win.total {
		body += fmt.Sprintf("\n\n[lines %d-%d of %d; from=%d continues]", from, last, win.total, last+1)
	}
	if !whole {
		body += fmt.Sprintf("\n\n[only the first %s of this file can be read here; use read for the rest]", formatSize(MemoryFileBytes))
	}
	return Result{Content: []message.Block{message.Text(body)},
		Details: map[string]any{"path": slash, "from": from, "to": last, "totalLines": win.total}}, nil
}
