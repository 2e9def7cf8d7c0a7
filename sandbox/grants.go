package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// systemDirs are the directories every confined command may read and run
// programs from. Missing ones are skipped.
var systemDirs = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
	"/nix/store", "/run/current-system/sw",
}

// privateDirs are the system directories where secrets live among public
// files: below them, only what everyone may read is granted, and never the
// files named in privateNames.
var privateDirs = []string{"/etc"}

// privateNames are never granted below a private directory, whatever their
// permissions say.
var privateNames = []string{
	"shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d",
	"ssl/private", "pki/tls/private", "security/opasswd", "krb5.keytab",
	"NetworkManager/system-connections", "wireguard", "ppp/chap-secrets", "ppp/pap-secrets",
	"credstore", "credstore.encrypted",
}

// grant is one Landlock rule: read (and run) or read and write access to a
// file or a directory tree.
type grant struct {
	Path  string `json:"path"`
	Dir   bool   `json:"dir,omitempty"`
	Write bool   `json:"write,omitempty"`
}

// readOnlyGrants expands the read-only part of the policy: the system
// directories and the extra paths, without the denied paths, and below
// the private directories without what is not readable by everyone.
//
// Landlock only adds access, so a denied path inside a granted directory is
// left out by granting the directory's other entries one by one, down to
// the denied path's parent. Symbolic links are never granted: Landlock
// checks the file a link leads to. Roots that do not exist are skipped;
// each root is granted as the file or directory its links lead to.
//
// It also returns the roots that keep a grant, as the file or directory
// their links lead to, without those inside another: what a command's
// private root binds (Landlock then grants within them).
func readOnlyGrants(roots, private, extra, deny []string) (grants, binds []grant, err error) {
	var denied []string
	for _, d := range deny {
		denied = append(denied, canonical(d))
	}
	for _, p := range private {
		real := canonical(p)
		for _, name := range privateNames {
			denied = append(denied, filepath.Join(real, name))
		}
		secret, err := unreadable(real)
		if err != nil {
			return nil, nil, err
		}
		denied = append(denied, secret...)
	}
	slices.Sort(denied)
	denied = slices.Compact(denied)

	seen := map[string]bool{}
	for _, root := range append(slices.Clone(roots), extra...) {
		real := canonical(root)
		if seen[real] {
			continue
		}
		seen[real] = true
		fi, err := os.Stat(real)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox: %s: %w", root, err)
		}
		n := len(grants)
		if grants, err = expand(grants, real, fi.IsDir(), denied); err != nil {
			return nil, nil, err
		}
		if len(grants) > n {
			binds = append(binds, grant{Path: real, Dir: fi.IsDir()})
		}
	}
	return grants, outermost(binds), nil
}

// bindsBelow returns the binds with those below dir replaced by the grants
// within them: a private root grants dir (its /tmp) read-write, which
// Landlock extends to every bind below it, so what such a bind holds
// beyond its grants (a denied file) must not be there at all.
func bindsBelow(binds, grants []grant, dir string) []grant {
	var out []grant
	for _, b := range binds {
		if !below(b.Path, dir) {
			out = append(out, b)
			continue
		}
		for _, g := range grants {
			if below(g.Path, b.Path) {
				out = append(out, g)
			}
		}
	}
	return out
}

// outermost sorts the grants by path and drops those inside another.
func outermost(gs []grant) []grant {
	slices.SortFunc(gs, func(a, b grant) int { return strings.Compare(a.Path, b.Path) })
	var out []grant
	for _, g := range gs {
		if !slices.ContainsFunc(out, func(o grant) bool {
			return g.Path == o.Path || strings.HasPrefix(g.Path, strings.TrimSuffix(o.Path, "/")+"/")
		}) {
			out = append(out, g)
		}
	}
	return out
}

// expand appends the grants of path minus the denied paths (sorted).
func expand(out []grant, path string, dir bool, denied []string) ([]grant, error) {
	if covered(path, denied) {
		return out, nil // denied itself, or below a denied directory
	}
	if !dir || !hasBelow(path, denied) {
		return append(out, grant{Path: path, Dir: dir}), nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		if out, err = expand(out, filepath.Join(path, e.Name()), e.IsDir(), denied); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// covered reports whether path is a denied path or lies below one.
func covered(path string, denied []string) bool {
	for _, d := range denied {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// hasBelow reports whether a denied path lies below dir.
func hasBelow(dir string, denied []string) bool {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for _, d := range denied {
		if strings.HasPrefix(d, prefix) {
			return true
		}
	}
	return false
}

// unreadable lists what below dir is not readable by everyone: files
// without the other-read bit, directories without other-read and
// other-search (whose contents are not walked).
func unreadable(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			out = append(out, p) // unreadable for the worker: not for commands either
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil // gone since listed
		}
		mode := fi.Mode().Perm()
		switch {
		case d.IsDir() && mode&0o005 != 0o005:
			out = append(out, p)
			return fs.SkipDir
		case !d.IsDir() && mode&0o004 == 0:
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// canonical cleans p and resolves its symbolic links as far as it exists.
func canonical(p string) string {
	p = filepath.Clean(p)
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	// Resolve the existing parent, so a denied path that does not exist
	// yet still matches the grants' spelling.
	dir, base := filepath.Split(p)
	if dir == p || dir == "" {
		return p
	}
	return filepath.Join(canonical(filepath.Clean(dir)), base)
}

// link is a symbolic link of the host, made again in a private root.
type link struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// hostLinks lists the symbolic links on the way to each path (each
// component that is one, and the links on the way to where it leads), so
// that the path, as spelled, resolves in a private root that binds only
// what the links lead to.
func hostLinks(paths ...string) []link {
	var out []link
	seen := map[string]bool{}
	var walk func(p string, depth int)
	walk = func(p string, depth int) {
		if depth > 40 { // ELOOP's bound
			return
		}
		parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
		cur := "/"
		for i, part := range parts {
			if part == "" {
				continue
			}
			cur = filepath.Join(cur, part)
			fi, err := os.Lstat(cur)
			if err != nil {
				return
			}
			if fi.Mode()&fs.ModeSymlink == 0 {
				continue
			}
			target, err := os.Readlink(cur)
			if err != nil {
				return
			}
			if !seen[cur] {
				seen[cur] = true
				out = append(out, link{Path: cur, Target: target})
			}
			next := target
			if !filepath.IsAbs(next) {
				next = filepath.Join(filepath.Dir(cur), next)
			}
			walk(filepath.Join(append([]string{next}, parts[i+1:]...)...), depth+1)
			return
		}
	}
	for _, p := range paths {
		walk(p, 0)
	}
	return out
}

// below reports whether p is dir or lies below it.
func below(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
