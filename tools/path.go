package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lanefleet/lanefleet/internal/pathless"
)

// resolve maps a path the model gave to a name relative to the workspace
// root, for use with os.Root. It refuses, with a message naming the path,
// empty paths, NUL bytes, "~" paths, absolute paths outside the workspace
// and relative paths whose ".." lead out of it. Symbolic links are not
// looked at here: os.Root refuses those that lead out when the name is
// used.
//
// The result is filepath.Clean'ed, relative, never ".." or "../…", and "."
// for the workspace itself.
func (w *ws) resolve(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New("path is empty; give a file path relative to the workspace")
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	case p == "~" || strings.HasPrefix(p, "~/"):
		return "", fmt.Errorf("path %q refers to the home directory, which is outside the workspace; use a path relative to the workspace", p)
	}
	if filepath.IsAbs(p) {
		c := filepath.Clean(p)
		for _, root := range []string{w.Dir, w.realDir} {
			if rel, ok := within(root, c); ok {
				return rel, nil
			}
		}
		return "", fmt.Errorf("path %q is outside the workspace %s; use a path relative to the workspace", p, w.Dir)
	}
	c := filepath.Clean(p)
	if escapes(c) {
		return "", fmt.Errorf("path %q escapes the workspace through \"..\"; only files inside the workspace can be accessed", p)
	}
	return c, nil
}

// within reports whether the clean absolute path p is root or below it, and
// returns p relative to root.
func within(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || escapes(rel) || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// escapes reports whether the clean relative path c climbs above its start.
func escapes(c string) bool {
	return c == ".." || strings.HasPrefix(c, ".."+string(filepath.Separator))
}

// fsError turns an error of an os.Root operation on the model's path p into
// a message the model can act on.
func fsError(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case isEscape(err):
		return fmt.Errorf("path %q resolves outside the workspace (through a symbolic link or \"..\"); only files inside the workspace can be accessed, and symbolic links must be relative and stay inside it", p)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("file not found: %q", p)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("permission denied: %q", p)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%q is a directory, not a file", p)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("a parent of %q is not a directory", p)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("path %q has too many levels of symbolic links", p)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("path %q is too long", p)
	case errors.Is(err, syscall.ENXIO):
		return fmt.Errorf("%q is not a regular file", p)
	}
	return fmt.Errorf("%q: %v", p, pathless.Err(err))
}

// isEscape recognises os.Root's refusal of a name that leads out of the
// root; the error value is not exported, so its text is matched.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}
