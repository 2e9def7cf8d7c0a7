package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A command with namespaces gets a root of its own: a read-only tmpfs
// holding only bind mounts of what it is granted (the system directories,
// the extra read-only paths, a few devices, its workspace), a fresh /proc,
// a private /tmp and the symbolic links that lead to them (/bin -> usr/bin
// and the like). /run, /var, /home, the sockets in them and the rest of
// the machine do not exist there; Landlock then grants within the binds
// (leaving out /etc/shadow and the denied paths).

// procLinks are the links to /proc/self/fd of every /dev.
var procLinks = []link{
	{Path: "/dev/fd", Target: "/proc/self/fd"},
	{Path: "/dev/stdin", Target: "/proc/self/fd/0"},
	{Path: "/dev/stdout", Target: "/proc/self/fd/1"},
	{Path: "/dev/stderr", Target: "/proc/self/fd/2"},
}

// rootBase is where the helper builds the private root before it pivots
// into it: any directory does, the mount namespace being its own, and
// every source was cloned before it is covered.
const rootBase = "/tmp"

// privateRoot builds the command's root and pivots into it. The bind
// sp.IDMapped (the workspace) comes from fd 5, idmapped by the worker. It
// notes whether /proc and /tmp could be mounted in rep.
func privateRoot(sp *spec, rep *report, step func(string, *bool, func() error) error) error {
	var sources []bindSource
	defer func() {
		for _, s := range sources {
			unix.Close(s.fd)
		}
	}()
	if err := cloneBinds(sp, &sources); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", rootBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,nr_inodes=4096,mode=0755"); err != nil {
		return fmt.Errorf("mount the root: %w", err)
	}
	at := func(p string) string { return filepath.Join(rootBase, p) }
	// In path order, so that a bind below /tmp lands in the private /tmp;
	// /proc while the host's is still there to vouch for it.
	type op struct {
		path string
		do   func() error
	}
	var ops []op
	if sp.MountProc {
		ops = append(ops, op{"/proc", func() error {
			return step("mount /proc", &rep.Proc, func() error {
				if err := os.MkdirAll(at("/proc"), 0o755); err != nil {
					return err
				}
				return unix.Mount("proc", at("/proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
			})
		}})
	}
	if sp.MountTmp {
		ops = append(ops, op{"/tmp", func() error {
			return step("mount /tmp", &rep.Tmp, func() error {
				if err := os.MkdirAll(at("/tmp"), 0o755); err != nil {
					return err
				}
				return unix.Mount("tmpfs", at("/tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=1777", sp.TmpSize))
			})
		}})
	}
	for _, s := range sources {
		ops = append(ops, op{s.g.Path, func() error {
			return s.bindAt(at(s.g.Path))
		}})
	}
	slices.SortStableFunc(ops, func(a, b op) int { return strings.Compare(a.path, b.path) })
	for _, o := range ops {
		if err := o.do(); err != nil {
			return err
		}
	}
	if err := makeLinks(sp, sources, at); err != nil {
		return err
	}
	return pivotInto(rootBase)
}

// bindSource is a bind of the private root: its grant and the detached
// clone of its tree (or the idmapped workspace's fd).
type bindSource struct {
	g  grant
	fd int
}

// cloneBinds clones the trees of sp.Binds, detached and read-only unless
// granted write, into *sources (which the caller closes, on an error too);
// a bind whose path does not exist is left out.
func cloneBinds(sp *spec, sources *[]bindSource) error {
	for _, g := range sp.Binds {
		if sp.IDMapped != "" && g.Path == sp.IDMapped {
			*sources = append(*sources, bindSource{g, workspaceFD})
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, g.Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("clone %s: %w", g.Path, err)
		}
		*sources = append(*sources, bindSource{g, fd})
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
		if !g.Write {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("bind %s: %w", g.Path, err)
		}
	}
	return nil
}

// bindAt moves the clone to dst in the new root, making the directory, or
// the file a bind of one needs, first.
func (s bindSource) bindAt(dst string) error {
	if s.g.Dir {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	if err := unix.MoveMount(s.fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("bind %s: %w", s.g.Path, err)
	}
	return nil
}

// makeLinks makes the symbolic links of the new root last, so that no
// directory made before went through one (an absolute target would lead
// out of the new root). A link inside a bind is there already.
func makeLinks(sp *spec, sources []bindSource, at func(string) string) error {
	var made []string
	for _, l := range append(slices.Clone(procLinks), sp.Links...) {
		if slices.ContainsFunc(sources, func(s bindSource) bool { return below(l.Path, s.g.Path) }) ||
			slices.ContainsFunc(made, func(m string) bool { return below(l.Path, m) }) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(at(l.Path)), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(l.Target, at(l.Path)); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("link %s: %w", l.Path, err)
		}
		made = append(made, l.Path)
	}
	return nil
}

// pivotInto makes dir the root, detaches the old one and remounts the new
// one read-only.
func pivotInto(dir string) error {
	if err := unix.Chdir(dir); err != nil {
		return err
	}
	// The old root ends up stacked on the new one, then detached.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return nil
}
