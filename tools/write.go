package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lanefleet/lanefleet/internal/pathless"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// writeTool is the built-in "write": {path, content}.
//
// It creates the file (mode 0644 before umask) and its missing parent
// directories (0755), or replaces the content of an existing file in place,
// keeping its mode and following symbolic links that stay in the workspace.
// Content over MaxWriteBytes, directories, paths ending in "/" and
// non-regular files are refused.
type writeTool struct{ w *ws }

func (t *writeTool) Spec() provider.Tool {
	return provider.Tool{
		Name: "write",
		Description: fmt.Sprintf("Write content to a file in the workspace. Creates the file if it doesn't exist, overwrites it if it does. Automatically creates parent directories. Content is limited to %s.",
			formatSize(int64(t.w.MaxWriteBytes))),
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"path":    map[string]any{"type": "string", "description": "Path to the file to write (relative to the workspace, or absolute inside it)"},
				"content": map[string]any{"type": "string", "description": "Content to write to the file"},
			},
			"required": []any{"path", "content"},
		},
	}
}

func (t *writeTool) Call(ctx context.Context, call Call) (Result, error) {
	p, _, err := stringArg(call.Args, "path", true)
	if err != nil {
		return Result{}, err
	}
	content, _, err := stringArg(call.Args, "content", true)
	if err != nil {
		return Result{}, err
	}
	if len(content) > t.w.MaxWriteBytes {
		return Result{}, fmt.Errorf("content for %q is %s, over the %s write limit; write the file in smaller parts (e.g. write the first part, then append with exec)",
			p, formatSize(int64(len(content))), formatSize(int64(t.w.MaxWriteBytes)))
	}
	rel, err := t.w.resolve(p)
	if err != nil {
		return Result{}, err
	}
	if rel == "." {
		return Result{}, fmt.Errorf("%q is the workspace directory itself, not a file", p)
	}
	if strings.HasSuffix(p, "/") {
		return Result{}, fmt.Errorf("path %q ends with a slash; give the name of a file (parent directories are created as needed)", p)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("write aborted: %w", err)
	}
	root, err := t.w.openRoot()
	if err != nil {
		return Result{}, err
	}
	defer root.Close()

	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return Result{}, fmt.Errorf("cannot create the parent directories of %q: %v", p, fsError(filepath.ToSlash(dir), err))
		}
	}
	created := false
	if _, err := root.Stat(rel); err != nil {
		created = true
	}
	n, err := writeFile(root, p, rel, []byte(content), true)
	if err != nil {
		return Result{}, err
	}
	return Result{
		Content: []message.Block{message.Text(fmt.Sprintf("Successfully wrote %d bytes to %s", n, p))},
		Details: map[string]any{"path": rel, "bytes": int64(n), "created": created},
	}, nil
}

// writeFile replaces the content of rel (creating it if create is set). The
// open is non-blocking so that a FIFO without a reader fails instead of
// hanging, and only regular files are written.
func writeFile(root *os.Root, p, rel string, data []byte, create bool) (int, error) {
	flags := os.O_WRONLY | oNonblock
	if create {
		flags |= os.O_CREATE
	}
	f, err := root.OpenFile(rel, flags, 0o644)
	if err != nil {
		return 0, fsError(p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fsError(p, err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%q is not a regular file (%s); only regular files can be written", p, fi.Mode().Type())
	}
	if err := f.Truncate(0); err != nil {
		return 0, fsError(p, err)
	}
	n, err := f.Write(data)
	if err != nil {
		return n, fmt.Errorf("writing %q failed after %d bytes: %v", p, n, pathless.Err(err))
	}
	if err := f.Close(); err != nil {
		return n, fmt.Errorf("writing %q failed: %v", p, pathless.Err(err))
	}
	return n, nil
}

// Idempotent implements Idempotent: writing the same content again leaves
// the same file. (edit is not: an edit whose new text contains its old
// text would apply twice.)
func (t *writeTool) Idempotent() bool { return true }
