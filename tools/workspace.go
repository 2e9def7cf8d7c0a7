package tools

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/internal/pathless"
)

// Defaults of the Workspace limits, used for every limit left zero.
const (
	// DefaultExecTimeout is how long exec lets a command run when the model
	// gives no timeout.
	DefaultExecTimeout = 3 * time.Minute
	// DefaultMaxExecTimeout caps the timeout the model may ask exec for.
	DefaultMaxExecTimeout = 10 * time.Minute
	// DefaultMaxOutputBytes caps the combined stdout+stderr exec returns.
	DefaultMaxOutputBytes = 50 << 10
	// DefaultMaxReadLines caps the lines one read returns.
	DefaultMaxReadLines = 2000
	// DefaultMaxReadBytes caps the bytes of text one read returns.
	DefaultMaxReadBytes = 50 << 10
	// DefaultMaxWriteBytes caps the content write accepts and the size of
	// the files edit rewrites.
	DefaultMaxWriteBytes = 10 << 20
	// DefaultMaxImageBytes caps the size of an image file read returns.
	DefaultMaxImageBytes = 5 << 20
	// DefaultShell is the shell exec runs commands with.
	DefaultShell = "/bin/sh"
)

// Workspace is the directory a run's built-in tools work in, and their
// limits. Zero limits take the Default* values.
//
// The file tools (read, write, edit) reach only files inside Dir: every path
// is resolved relative to Dir and opened through an [os.Root], so neither
// "..", absolute paths outside Dir nor symbolic links (which must be relative
// and stay inside Dir) can lead out of it. Hard links and bind mounts that
// already exist inside Dir are not detected.
//
// exec (see [Exec]) is different: it runs a shell whose working directory is
// Dir, confined by a [sandbox.Sandbox] to Dir and the read-only system
// directories where the platform allows, else with the worker's privileges
// if the operator chose so.
//
// A Workspace never reads or changes the environment or the working directory
// of the process, so many runs with different workspaces can share one
// process.
type Workspace struct {
	// Dir is the absolute path of the workspace directory; it must exist.
	Dir string
	// Env is the exact environment of exec'd commands ("KEY=value"
	// entries). Nil or empty means an empty environment, never the
	// process's own.
	Env []string
	// NamedEnv holds variables ("KEY=value" entries, such as skill API
	// keys) that exec gives a command only when the command's text names
	// them, as $KEY or ${KEY}; the programs it starts inherit them. A
	// command that does not name one, such as "env", never sees it. An
	// Env entry of the same key wins.
	NamedEnv []string
	// Shell is the absolute path of the shell exec runs as `Shell -c
	// command`; empty means DefaultShell.
	Shell string

	// ExecTimeout is the timeout of a command when the model gives none.
	ExecTimeout time.Duration
	// MaxExecTimeout caps the timeout the model may ask for.
	MaxExecTimeout time.Duration
	// MaxOutputBytes caps exec's combined output; beyond it the head and
	// the tail are kept with a notice in between.
	MaxOutputBytes int
	// MaxReadLines caps the lines one read returns.
	MaxReadLines int
	// MaxReadBytes caps the text bytes one read returns.
	MaxReadBytes int
	// MaxWriteBytes caps write's content and the files edit rewrites.
	MaxWriteBytes int
	// MaxImageBytes caps the image files read returns as image blocks.
	MaxImageBytes int
}

// ws is a validated Workspace with defaults filled in.
type ws struct {
	Workspace
	// realDir is Dir with its symbolic links resolved, so that absolute
	// paths given through either spelling are recognised as inside.
	realDir string
}

// Builtin returns the built-in file tools working in w, in this order:
//
//   - read {path, offset?, limit?}: a text file by lines from offset
//     (1-based), within MaxReadLines lines and MaxReadBytes bytes, with a
//     notice naming the offset to continue from when cut; PNG, JPEG, GIF and
//     WebP files as image blocks (up to MaxImageBytes); other binary files,
//     directories and non-regular files are refused.
//   - write {path, content}: creates or overwrites a file, creating parent
//     directories; content is capped at MaxWriteBytes.
//   - edit {path, oldText, newText}: replaces the one occurrence of oldText
//     (0 or several occurrences are errors); line endings are adapted to
//     the file's; details carry line numbers and a line diff.
//   - apply_patch {input}: a multi-file patch in the format of package
//     patch (*** Begin Patch … *** End Patch: add, delete, update with @@
//     hunks, move), applied all or nothing; files keep their mode; the
//     details list the added, modified and deleted files.
//
// exec is not among them: a shell is offered only when the operator asks,
// through [Exec]:
//
//   - exec {command, timeout?}: Shell -c command in Dir with exactly Env,
//     confined by the sandbox; the command and its processes are killed on
//     timeout, cancellation and exit; combined output capped at
//     MaxOutputBytes keeping head and tail; exit code in the text and the
//     details; partial output through Call.Update at most every 100 ms. A
//     failed command is an isError Result.
//
// Errors about arguments, paths and files are returned as errors whose text
// tells the model what to do instead. The tools keep no state between calls
// and may be called concurrently.
//
// Builtin fails if w.Dir is not an absolute path of an existing directory,
// if w.Shell is set but not absolute, or if a limit is negative.
func Builtin(w Workspace) (List, error) {
	v, err := w.validate()
	if err != nil {
		return nil, err
	}
	return List{&readTool{v}, &writeTool{v}, &editTool{v}, newApplyPatch(v)}, nil
}

func (w Workspace) validate() (*ws, error) {
	if w.Dir == "" {
		return nil, errors.New("tools: Workspace.Dir is required")
	}
	if !filepath.IsAbs(w.Dir) {
		return nil, fmt.Errorf("tools: Workspace.Dir %q is not absolute", w.Dir)
	}
	w.Dir = filepath.Clean(w.Dir)
	fi, err := os.Stat(w.Dir)
	if err != nil {
		return nil, fmt.Errorf("tools: Workspace.Dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("tools: Workspace.Dir %q is not a directory", w.Dir)
	}
	real, err := filepath.EvalSymlinks(w.Dir)
	if err != nil {
		return nil, fmt.Errorf("tools: Workspace.Dir: %w", err)
	}
	if w.Shell == "" {
		w.Shell = DefaultShell
	}
	if !filepath.IsAbs(w.Shell) {
		return nil, fmt.Errorf("tools: Workspace.Shell %q is not absolute", w.Shell)
	}
	w.Env = slices.Clone(w.Env)
	if w.Env == nil {
		w.Env = []string{}
	}
	w.NamedEnv = slices.Clone(w.NamedEnv)
	for _, kv := range w.NamedEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("tools: Workspace.NamedEnv entry without a KEY= (%d bytes)", len(kv))
		}
	}
	durs := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"ExecTimeout", &w.ExecTimeout, DefaultExecTimeout},
		{"MaxExecTimeout", &w.MaxExecTimeout, DefaultMaxExecTimeout},
	}
	for _, d := range durs {
		if *d.v < 0 {
			return nil, fmt.Errorf("tools: Workspace.%s is negative", d.name)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if w.ExecTimeout > w.MaxExecTimeout {
		w.ExecTimeout = w.MaxExecTimeout
	}
	ints := []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxOutputBytes", &w.MaxOutputBytes, DefaultMaxOutputBytes},
		{"MaxReadLines", &w.MaxReadLines, DefaultMaxReadLines},
		{"MaxReadBytes", &w.MaxReadBytes, DefaultMaxReadBytes},
		{"MaxWriteBytes", &w.MaxWriteBytes, DefaultMaxWriteBytes},
		{"MaxImageBytes", &w.MaxImageBytes, DefaultMaxImageBytes},
	}
	for _, n := range ints {
		if *n.v < 0 {
			return nil, fmt.Errorf("tools: Workspace.%s is negative", n.name)
		}
		if *n.v == 0 {
			*n.v = n.def
		}
	}
	return &ws{Workspace: w, realDir: real}, nil
}

// openRoot opens the workspace for one call. Opening per call (one
// syscall) keeps the tools free of a lifecycle: nothing to close.
func (w *ws) openRoot() (*os.Root, error) {
	r, err := os.OpenRoot(w.Dir)
	if err != nil {
		return nil, fmt.Errorf("workspace directory %s is not available: %v", w.Dir, pathless.Err(err))
	}
	return r, nil
}
