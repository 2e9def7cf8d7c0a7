package tools

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lanefleet/lanefleet/internal/pathless"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools/patch"
)

// applyPatchTool is the built-in "apply_patch": {input}, a patch in the
// format of package patch (*** Begin Patch … *** End Patch) adding,
// deleting, updating and moving files of the workspace in one call.
//
// A call is atomic: every operation is worked out in memory first (files
// read, hunks matched, sizes checked), then the new contents are staged
// in temporary files next to their targets and swapped in by renames; if
// anything fails, what was swapped is put back and nothing of the patch
// remains. Paths follow the file tools' confinement (relative to the
// workspace or absolute inside it, no "..", no symbolic link out of it);
// symbolic links themselves, directories, non-regular files, binary files
// and files over MaxWriteBytes are refused. Updated files keep their
// mode. As in the reference, an added file or a move's destination that
// exists is replaced.
type applyPatchTool struct {
	w *ws
	// rename is os.Root.Rename; tests make it fail.
	rename func(root *os.Root, from, to string) error
}

func newApplyPatch(w *ws) *applyPatchTool {
	return &applyPatchTool{w: w, rename: func(r *os.Root, from, to string) error { return r.Rename(from, to) }}
}

func (t *applyPatchTool) Spec() provider.Tool {
	return provider.Tool{
		Name: "apply_patch",
		Description: "Apply a patch to one or more files of the workspace in one call, all or nothing. The input runs from \"*** Begin Patch\" to \"*** End Patch\"; " +
			"each file starts with \"*** Add File: path\" (then every line of the new file prefixed with +), \"*** Delete File: path\", or \"*** Update File: path\" " +
			"(optionally followed by \"*** Move to: new/path\") and hunks: \"@@\" or \"@@ a line to find first\", then lines prefixed with ' ' (context, about 3 lines around each change), '-' (removed) or '+' (added); " +
			"\"*** End of File\" after a hunk that ends at the end of the file.",
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"input": map[string]any{"type": "string", "description": "The whole patch, from *** Begin Patch to *** End Patch"},
			},
			"required": []any{"input"},
		},
	}
}

func (t *applyPatchTool) Call(ctx context.Context, call Call) (Result, error) {
	input, _, err := stringArg(call.Args, "input", true)
	if err != nil {
		return Result{}, err
	}
	if strings.TrimSpace(input) == "" {
		return Result{}, errors.New("input is empty; give the patch, from *** Begin Patch to *** End Patch")
	}
	if len(input) > t.w.MaxWriteBytes {
		return Result{}, fmt.Errorf("the patch is %s, over the %s limit; split it into several calls", formatSize(int64(len(input))), formatSize(int64(t.w.MaxWriteBytes)))
	}
	ops, err := patch.Parse(input)
	if err != nil {
		return Result{}, fmt.Errorf("%w; nothing was changed", err)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("apply_patch aborted: %w", err)
	}
	root, err := t.w.openRoot()
	if err != nil {
		return Result{}, err
	}
	defer root.Close()

	p := &plan{t: t, root: root, files: map[string]*planned{}}
	for _, op := range ops {
		if err := p.apply(op); err != nil {
			return Result{}, fmt.Errorf("%w; nothing was changed", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("apply_patch aborted before writing: %w", err)
	}
	if err := p.commit(); err != nil {
		return Result{}, err
	}

	var b strings.Builder
	b.WriteString("Success. Updated the following files:")
	for _, s := range []struct {
		mark  string
		names []string
	}{{"A", p.added}, {"M", p.modified}, {"D", p.deleted}} {
		for _, n := range s.names {
			fmt.Fprintf(&b, "\n%s %s", s.mark, n)
		}
	}
	return Result{
		Content: []message.Block{message.Text(b.String())},
		Details: map[string]any{"added": anyList(p.added), "modified": anyList(p.modified), "deleted": anyList(p.deleted)},
	}, nil
}

func anyList(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// planned is one file of a patch: as found on disk, and as the patch
// leaves it.
type planned struct {
	rel     string // resolved name under the root
	name    string // as the patch gave it, for messages
	existed bool
	mode    fs.FileMode
	present bool // after the operations so far
	content string
}

// plan is a patch worked out in memory.
type plan struct {
	t     *applyPatchTool
	root  *os.Root
	files map[string]*planned
	order []string // rels in first-touched order

	added, modified, deleted []string
}

// load returns the planned state of the file the patch names p.
func (p *plan) load(name string) (*planned, error) {
	rel, err := p.t.w.resolve(name)
	if err != nil {
		return nil, err
	}
	if rel == "." || strings.HasSuffix(name, "/") {
		return nil, fmt.Errorf("%q is a directory, not a file", name)
	}
	if f, ok := p.files[rel]; ok {
		return f, nil
	}
	f := &planned{rel: rel, name: name, mode: 0o644}
	fi, err := p.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fsError(name, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%q is a symbolic link; apply_patch changes regular files only: patch the file it points to", name)
	case fi.IsDir():
		return nil, fmt.Errorf("%q is a directory, not a file", name)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%q is not a regular file (%s); apply_patch changes regular files only", name, fi.Mode().Type())
	case fi.Size() > int64(p.t.w.MaxWriteBytes):
		return nil, fmt.Errorf("%q is %s, over the %s limit for apply_patch", name, formatSize(fi.Size()), formatSize(int64(p.t.w.MaxWriteBytes)))
	default:
		data, err := p.read(name, rel)
		if err != nil {
			return nil, err
		}
		f.existed, f.present, f.content, f.mode = true, true, string(data), fi.Mode().Perm()
	}
	p.files[rel] = f
	p.order = append(p.order, rel)
	return f, nil
}

// read reads a regular text file of at most MaxWriteBytes.
func (p *plan) read(name, rel string) ([]byte, error) {
	fh, err := p.root.OpenFile(rel, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return nil, fsError(name, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, int64(p.t.w.MaxWriteBytes)+1))
	if err != nil {
		return nil, fsError(name, err)
	}
	if len(data) > p.t.w.MaxWriteBytes {
		return nil, fmt.Errorf("%q is over the %s limit for apply_patch", name, formatSize(int64(p.t.w.MaxWriteBytes)))
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return nil, fmt.Errorf("%q looks like a binary file (it contains NUL bytes); apply_patch only changes text files", name)
	}
	return data, nil
}

// apply works out one operation.
func (p *plan) apply(op patch.Op) error {
	f, err := p.load(op.Path)
	if err != nil {
		return fmt.Errorf("%s (patch line %d): %w", op.Kind, op.Line, err)
	}
	switch op.Kind {
	case patch.Add:
		if err := p.fits(f, op.Contents); err != nil {
			return err
		}
		f.present, f.content = true, op.Contents
		p.added = appendNew(p.added, op.Path)
	case patch.Delete:
		if !f.present {
			return fmt.Errorf("cannot delete %q (patch line %d): file not found", op.Path, op.Line)
		}
		f.present, f.content = false, ""
		p.deleted = appendNew(p.deleted, op.Path)
	case patch.Update:
		if !f.present {
			return fmt.Errorf("cannot update %q (patch line %d): file not found; use *** Add File: to create a file", op.Path, op.Line)
		}
		out, err := patch.Apply(f.content, op.Chunks)
		if err != nil {
			return fmt.Errorf("%q: %w. Read the file again and make the hunk's context and '-' lines match it exactly", op.Path, err)
		}
		dst := f
		if op.MoveTo != "" {
			if dst, err = p.load(op.MoveTo); err != nil {
				return fmt.Errorf("move to (patch line %d): %w", op.Line, err)
			}
		}
		if err := p.fits(dst, out); err != nil {
			return err
		}
		if dst != f {
			dst.mode = f.mode
			f.present, f.content = false, ""
		}
		dst.present, dst.content = true, out
		p.modified = appendNew(p.modified, cmpOr(op.MoveTo, op.Path))
	}
	return nil
}

func (p *plan) fits(f *planned, content string) error {
	if len(content) > p.t.w.MaxWriteBytes {
		return fmt.Errorf("the patched %q would be %s, over the %s limit", f.name, formatSize(int64(len(content))), formatSize(int64(p.t.w.MaxWriteBytes)))
	}
	return nil
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// commit writes the plan: each new content staged in a temporary file
// beside its target, then every target swapped (the old file renamed to a
// backup, the temporary file renamed in its place) or removed (renamed to
// a backup). On any failure the swaps done are undone in reverse, and
// temporary files and the directories made for them are removed; on
// success the backups are removed.
func (p *plan) commit() (err error) {
	var suffix [6]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return fmt.Errorf("apply_patch: %w; nothing was changed", err)
	}
	tag := ".patch-" + hex.EncodeToString(suffix[:])
	var tx patchTxn
	defer func() {
		if err == nil {
			tx.keep(p.root)
			return
		}
		err = tx.rollback(p.root, err)
	}()
	swaps, err := p.stageAll(&tx, tag)
	if err != nil {
		return err
	}
	return p.swapAll(&tx, swaps, tag)
}

// patchTxn is what a commit did so far, to keep or to undo.
type patchTxn struct {
	temps   []string // staged files not yet renamed into place
	dirs    []string // directories made, outermost first
	undo    []func() error
	backups []string
}

// keep removes the backups of a commit that succeeded.
func (tx *patchTxn) keep(root *os.Root) {
	for _, b := range tx.backups {
		root.Remove(b) //nolint:errcheck // a leftover backup is harmless
	}
}

// rollback undoes a commit that failed with err, newest step first, and
// removes its staged files and the directories it made; the error says
// whether the files are back.
func (tx *patchTxn) rollback(root *os.Root, err error) error {
	var failed []string
	for i := len(tx.undo) - 1; i >= 0; i-- {
		if e := tx.undo[i](); e != nil {
			failed = append(failed, e.Error())
		}
	}
	for _, tmp := range tx.temps {
		root.Remove(tmp) //nolint:errcheck // best effort
	}
	for i := len(tx.dirs) - 1; i >= 0; i-- {
		root.Remove(tx.dirs[i]) //nolint:errcheck // only empty ones go
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w; putting the files back failed too (%s): check the workspace", err, strings.Join(failed, "; "))
	}
	return fmt.Errorf("%w; nothing was changed", err)
}

// patchSwap is one file's change: its staged copy to rename into place,
// or its removal (tmp "").
type patchSwap struct {
	f   *planned
	tmp string
}

// stageAll writes the new content of every changed file to a staged copy
// beside it, making parent directories as needed, in the plan's order.
func (p *plan) stageAll(tx *patchTxn, tag string) ([]patchSwap, error) {
	var swaps []patchSwap
	for _, rel := range p.order {
		f := p.files[rel]
		switch {
		case !f.existed && !f.present:
			continue
		case f.existed && f.present && !p.changed(f):
			continue
		}
		if !f.present {
			swaps = append(swaps, patchSwap{f: f})
			continue
		}
		made, err := p.mkdirs(filepath.Dir(rel))
		tx.dirs = append(tx.dirs, made...)
		if err != nil {
			return nil, fmt.Errorf("cannot create the parent directories of %q: %v", f.name, err)
		}
		tmp := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+tag+".tmp")
		if err := p.stage(tmp, f); err != nil {
			return nil, err
		}
		tx.temps = append(tx.temps, tmp)
		swaps = append(swaps, patchSwap{f: f, tmp: tmp})
	}
	return swaps, nil
}

// swapAll moves each existing file aside as a backup and renames its
// staged copy into place, noting how to undo each step.
func (p *plan) swapAll(tx *patchTxn, swaps []patchSwap, tag string) error {
	for _, s := range swaps {
		rel := s.f.rel
		if s.f.existed {
			bak := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+tag+".orig")
			if err := p.t.rename(p.root, rel, bak); err != nil {
				return fmt.Errorf("cannot replace %q: %v", s.f.name, fsError(s.f.name, err))
			}
			tx.backups = append(tx.backups, bak)
			tx.undo = append(tx.undo, func() error { return p.t.rename(p.root, bak, rel) })
		}
		if s.tmp == "" {
			continue
		}
		if err := p.t.rename(p.root, s.tmp, rel); err != nil {
			return fmt.Errorf("cannot write %q: %v", s.f.name, fsError(s.f.name, err))
		}
		tx.temps = slices.DeleteFunc(tx.temps, func(t string) bool { return t == s.tmp })
		tx.undo = append(tx.undo, func() error { return p.root.Remove(rel) })
	}
	return nil
}

// changed reports whether an existing file's planned content differs from
// what was read.
func (p *plan) changed(f *planned) bool {
	data, err := p.read(f.name, f.rel)
	return err != nil || string(data) != f.content
}

// mkdirs makes dir and its missing parents, returning those it made,
// outermost first.
func (p *plan) mkdirs(dir string) ([]string, error) {
	var missing []string
	for d := dir; d != "." && d != string(filepath.Separator); d = filepath.Dir(d) {
		if _, err := p.root.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	slices.Reverse(missing)
	var made []string
	for _, d := range missing {
		if err := p.root.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return made, fsError(filepath.ToSlash(d), err)
		}
		made = append(made, d)
	}
	return made, nil
}

// stage writes f's new content to tmp with f's mode.
func (p *plan) stage(tmp string, f *planned) error {
	fh, err := p.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
	if err != nil {
		return fmt.Errorf("cannot write %q: %v", f.name, fsError(f.name, err))
	}
	_, werr := io.WriteString(fh, f.content)
	cerr := fh.Close()
	if err := errors.Join(werr, cerr); err != nil {
		p.root.Remove(tmp) //nolint:errcheck // best effort
		return fmt.Errorf("writing %q failed: %v", f.name, pathless.Err(err))
	}
	if err := p.root.Chmod(tmp, f.mode); err != nil {
		p.root.Remove(tmp) //nolint:errcheck // best effort
		return fmt.Errorf("cannot set the mode of %q: %v", f.name, fsError(f.name, err))
	}
	return nil
}
