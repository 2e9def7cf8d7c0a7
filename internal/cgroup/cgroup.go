// Package cgroup reads the Linux control groups the process belongs to:
// where each hierarchy is mounted (/proc/self/mountinfo), the process's
// cgroup in each (/proc/self/cgroup), and the memory limit that applies to
// it (MemoryLimit), and the machine's memory, which bounds a process that
// no cgroup limits (PhysicalMemory, from /proc/meminfo). It only reads; package sandbox makes the cgroups of
// exec's commands with what it finds.
//
// cgroup.go holds the parsing, memory.go the memory limit.
package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Mount is a cgroup hierarchy mounted: a line of /proc/self/mountinfo
// whose filesystem is cgroup (v1) or cgroup2.
type Mount struct {
	Root   string   // the cgroup mounted (not "/" in another cgroup namespace)
	Point  string   // where
	FSType string   // "cgroup" or "cgroup2"
	Super  []string // super options: a v1 hierarchy's controllers among them
}

// V2 reports whether m is the unified (v2) hierarchy.
func (m Mount) V2() bool { return m.FSType == "cgroup2" }

// Has reports whether the v1 hierarchy m holds controller c.
func (m Mount) Has(c string) bool { return slices.Contains(m.Super, c) }

// Dir is the directory of the cgroup path in m, or "" when the path is not
// below the mount's root (another cgroup namespace) or leaves it ("..").
func (m Mount) Dir(path string) string {
	rel := path
	if m.Root != "/" {
		var ok bool
		rel, ok = strings.CutPrefix(path, m.Root)
		if !ok || (rel != "" && rel[0] != '/') {
			return ""
		}
	}
	dir, point := filepath.Join(m.Point, rel), filepath.Clean(m.Point)
	if dir != point && !strings.HasPrefix(dir, strings.TrimSuffix(point, "/")+"/") {
		return ""
	}
	return dir
}

// ParseMountinfo reads the cgroup mounts of /proc/self/mountinfo; other
// lines, and lines longer than 1 MiB, are skipped.
func ParseMountinfo(b []byte) []Mount {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source super
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		out = append(out, Mount{Root: unescapeMount(f[3]), Point: unescapeMount(f[4]), FSType: fstype, Super: strings.Split(f[sep+3], ",")})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline
// and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseProcCgroup reads /proc/self/cgroup: each v1 controller's cgroup
// path, and the v2 path under "".
func ParseProcCgroup(b []byte) map[string]string {
	out := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id == "0" && ctrls == "" {
			out[""] = path
			continue
		}
		for c := range strings.SplitSeq(ctrls, ",") {
			out[c] = path
		}
	}
	return out
}

// Self is the process's cgroups as the files below root show them (root
// "/" on the host; a directory laid out the same way in tests): the cgroup
// mounts, with their points under root, and the process's path in each
// hierarchy.
func Self(root string) ([]Mount, map[string]string, error) {
	mi, err := readBounded(filepath.Join(root, "proc/self/mountinfo"), 4<<20)
	if err != nil {
		return nil, nil, err
	}
	pc, err := readBounded(filepath.Join(root, "proc/self/cgroup"), 64<<10)
	if err != nil {
		return nil, nil, err
	}
	mounts := ParseMountinfo(mi)
	for i := range mounts {
		mounts[i].Point = filepath.Join(root, mounts[i].Point)
	}
	return mounts, ParseProcCgroup(pc), nil
}

// readBounded reads a file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("cgroup: %s is longer than %d bytes", path, max)
	}
	return b, nil
}
