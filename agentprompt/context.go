package agentprompt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/internal/pathless"
)

// The workspace files OpenClaw injects into the system prompt, in its order.
const (
	AgentsFile    = "AGENTS.md"
	SoulFile      = "SOUL.md"
	ToolsFile     = "TOOLS.md"
	IdentityFile  = "IDENTITY.md"
	UserFile      = "USER.md"
	HeartbeatFile = "HEARTBEAT.md"
	BootstrapFile = "BOOTSTRAP.md"
	MemoryFile    = "MEMORY.md"
	// MemoryAltFile is loaded besides MemoryFile when both exist and are
	// different files.
	MemoryAltFile = "memory.md"
)

// Defaults of ContextOptions, used for every limit left zero. Characters are
// UTF-16 code units, as the reference counts them.
const (
	// DefaultMaxFileChars caps one context file in the prompt.
	DefaultMaxFileChars = 20_000
	// DefaultMaxTotalChars caps all context files together.
	DefaultMaxTotalChars = 150_000
	// DefaultMaxFileBytes is the largest file read at all; a larger one is
	// skipped with a warning rather than read into memory to be trimmed.
	DefaultMaxFileBytes = 2 << 20
)

// Trimming a file keeps its head and tail in these proportions of the limit.
const (
	headRatio = 0.7
	tailRatio = 0.2
	// minFileBudget: once less than this is left of the total, no further
	// file is added.
	minFileBudget = 64
)

// DefaultContextFileNames returns the files LoadContextFiles reads when
// ContextOptions.Names is nil, in the reference's order: AGENTS.md, SOUL.md,
// TOOLS.md, IDENTITY.md, USER.md, HEARTBEAT.md, BOOTSTRAP.md, MEMORY.md,
// memory.md.
func DefaultContextFileNames() []string {
	return []string{AgentsFile, SoulFile, ToolsFile, IdentityFile, UserFile, HeartbeatFile, BootstrapFile, MemoryFile, MemoryAltFile}
}

// ContextOptions configures LoadContextFiles. The zero value loads the
// default files with the default limits.
type ContextOptions struct {
	// Names are the files to load, as paths relative to the workspace, in
	// prompt order; nil means DefaultContextFileNames(). (OpenClaw gives
	// sub-agent runs only AGENTS.md and TOOLS.md.)
	Names []string
	// MaxFileChars caps each file; 0 means DefaultMaxFileChars.
	MaxFileChars int
	// MaxTotalChars caps all files together; 0 means
	// max(MaxFileChars, DefaultMaxTotalChars).
	MaxTotalChars int
	// MaxFileBytes is the largest file read; 0 means DefaultMaxFileBytes.
	MaxFileBytes int64
	// MarkMissing adds, for each file that does not exist or cannot be
	// read, an entry whose content is "[MISSING] Expected at: <path>", as
	// the reference does (MEMORY.md and memory.md excepted: they are
	// optional). By default missing files are left out.
	MarkMissing bool
}

func (o ContextOptions) withDefaults() ContextOptions {
	if o.Names == nil {
		o.Names = DefaultContextFileNames()
	}
	if o.MaxFileChars <= 0 {
		o.MaxFileChars = DefaultMaxFileChars
	}
	if o.MaxTotalChars <= 0 {
		o.MaxTotalChars = max(o.MaxFileChars, DefaultMaxTotalChars)
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	return o
}

// ContextFile is a workspace file as injected into the system prompt.
type ContextFile struct {
	// Name is the file's name as listed in ContextOptions.Names.
	Name string
	// Path is the file's absolute path; the prompt shows it as the file's
	// heading.
	Path string
	// Content is what the prompt shows: the file without trailing white
	// space, trimmed to the limits, or the [MISSING] marker.
	Content string
	// Truncated reports that Content is shorter than the file.
	Truncated bool
	// Missing reports a marker entry for a file that could not be read.
	Missing bool
}

// LoadContextFiles reads the workspace's context files (see
// ContextOptions.Names) for the system prompt, with the reference's limits:
// each file is cut to MaxFileChars, keeping its first 70 % and last 20 %
// around a marker that tells the model to read the file for the rest, and
// the files together to MaxTotalChars; once less than 64 characters are
// left no further file is added. Empty files are left out.
//
// workspace must be an absolute path. Files are opened through an
// [os.Root], so a symbolic link that leads out of the workspace is refused;
// two names that are the same file (MEMORY.md and memory.md on a
// case-insensitive file system) give one entry. A file that does not exist
// is skipped silently; one that is refused, not a regular file, larger than
// MaxFileBytes or unreadable is skipped with a warning, as is each trimmed
// file.
func LoadContextFiles(workspace string, opts ContextOptions) ([]ContextFile, []Warning) {
	opts = opts.withDefaults()
	if !filepath.IsAbs(workspace) {
		return nil, []Warning{{workspace, "workspace is not an absolute path; no context files loaded"}}
	}
	workspace = filepath.Clean(workspace)
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, []Warning{{workspace, fmt.Sprintf("workspace unreadable; no context files loaded: %v", pathless.Err(err))}}
	}
	defer root.Close()

	var (
		files []ContextFile
		warns []Warning
		seen  []os.FileInfo
	)
	remaining := max(1, opts.MaxTotalChars)
	for _, name := range opts.Names {
		if remaining <= 0 {
			break
		}
		path := filepath.Join(workspace, name)
		if !filepath.IsLocal(name) {
			warns = append(warns, Warning{path, "context file is not inside the workspace; skipped"})
			continue
		}
		content, fi, err := readRootFile(root, name, opts.MaxFileBytes, true)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				warns = append(warns, Warning{path, fmt.Sprintf("context file skipped: %v", err)})
			}
			if !opts.MarkMissing || name == MemoryFile || name == MemoryAltFile {
				continue
			}
			marker := clampToBudget("[MISSING] Expected at: "+path, remaining)
			if marker == "" {
				break
			}
			remaining -= ecmatext.Len(marker)
			files = append(files, ContextFile{Name: name, Path: path, Content: marker, Missing: true})
			continue
		}
		if sameFileSeen(seen, fi) {
			continue
		}
		seen = append(seen, fi)
		if remaining < minFileBudget {
			warns = append(warns, Warning{path, fmt.Sprintf("context budget has %d characters left (< %d); this and later context files skipped", remaining, minFileBudget)})
			break
		}
		fileMax := max(1, min(opts.MaxFileChars, remaining))
		trimmed, originalLen, truncated := trimContextFile(content, filepath.Base(name), fileMax)
		within := clampToBudget(trimmed, remaining)
		if within == "" {
			continue // empty, or only white space
		}
		truncated = truncated || len(within) < len(trimmed)
		if truncated {
			warns = append(warns, Warning{path, fmt.Sprintf("context file is %d characters (limit %d); truncated in the prompt", originalLen, fileMax)})
		}
		remaining -= ecmatext.Len(within)
		files = append(files, ContextFile{Name: name, Path: path, Content: within, Truncated: truncated})
	}
	return files, warns
}

// sameFileSeen reports whether fi is the same file as one of seen.
func sameFileSeen(seen []os.FileInfo, fi os.FileInfo) bool {
	for _, s := range seen {
		if os.SameFile(s, fi) {
			return true
		}
	}
	return false
}

// trimContextFile drops trailing white space from content and, if it is
// still longer than maxChars, keeps its first 70 % and last 20 % of maxChars
// around a marker naming the file. It returns the result, the length of the
// untrimmed content (without trailing white space) and whether it cut.
//
// The reference cuts with String.slice, which may split a surrogate pair;
// cuts here never split one, so they may keep one code unit less. It also
// keeps the whole content as the "tail" when maxChars < 5 (slice(-0)); here
// that tail is empty.
func trimContextFile(content, fileName string, maxChars int) (string, int, bool) {
	content = ecmatext.TrimEnd(content)
	n := ecmatext.Len(content)
	if n <= maxChars {
		return content, n, false
	}
	headChars := int(float64(maxChars) * headRatio)
	tailChars := int(float64(maxChars) * tailRatio)
	head := ecmatext.Prefix(content, headChars)
	tail := suffix(content, n, tailChars)
	marker := fmt.Sprintf("\n[...truncated, read %s for full content...]\n…(truncated %s: kept %d+%d chars of %d)…\n",
		fileName, fileName, headChars, tailChars, n)
	return head + "\n" + marker + "\n" + tail, n, true
}

// suffix returns the longest suffix of s (of UTF-16 length n) at most m code
// units long that does not split a surrogate pair.
func suffix(s string, n, m int) string {
	if m <= 0 {
		return ""
	}
	i := ecmatext.ByteOffset(s, n-m)
	if ecmatext.Len(s[i:]) > m {
		// ByteOffset moved back to the start of a pair; skip the pair.
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[i:]
}

// clampToBudget cuts content to budget code units, ending it with "…" when
// there is room for one (the reference's clampToBudget).
func clampToBudget(content string, budget int) string {
	if budget <= 0 {
		return ""
	}
	if ecmatext.Len(content) <= budget {
		return content
	}
	if budget <= 3 {
		return ecmatext.Prefix(content, budget)
	}
	return ecmatext.Prefix(content, budget-1) + "…"
}

// projectContext renders the context files as OpenClaw's "# Project
// Context" section, or "" when there are none.
func projectContext(files []ContextFile) string {
	if len(files) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Project Context\n\nThe following project context files have been loaded:\n")
	for _, f := range files {
		base := f.Path
		if i := strings.LastIndexAny(base, `/\`); i >= 0 {
			base = base[i+1:]
		}
		if strings.EqualFold(base, SoulFile) {
			b.WriteString("If SOUL.md is present, embody its persona and tone. Avoid stiff, generic replies; " +
				"follow its guidance unless higher-priority instructions override it.\n")
			break
		}
	}
	for _, f := range files {
		b.WriteString("\n## ")
		b.WriteString(f.Path)
		b.WriteString("\n\n")
		b.WriteString(f.Content)
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}
