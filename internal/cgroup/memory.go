package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// Limit is a memory limit that applies to the process.
type Limit struct {
	Bytes int64
	File  string // the file that sets it, e.g. /sys/fs/cgroup/memory.max
}

// noLimit: a v1 cgroup without a limit reports the largest page-aligned
// int64 (9223372036854771712); anything from here up is no limit.
const noLimit = 1 << 62

// MemoryLimit is the smallest memory limit that applies to the process,
// as the files below root show it (root "/" on the host): cgroup v2's
// memory.max and memory.high, cgroup v1's memory.limit_in_bytes, of the
// process's cgroup and of each of its ancestors up to the hierarchy's
// root (a parent's limit bounds its children). ok is false when none is
// set, and on a system without cgroups (no /proc/self/mountinfo); err
// says which file could not be read or parsed.
func MemoryLimit(root string) (lim Limit, ok bool, err error) {
	mounts, own, err := Self(root)
	if errors.Is(err, fs.ErrNotExist) {
		return Limit{}, false, nil
	}
	if err != nil {
		return Limit{}, false, err
	}
	for _, m := range mounts {
		key, files := "", []string{"memory.max", "memory.high"}
		if !m.V2() {
			key, files = "memory", []string{"memory.limit_in_bytes"}
			if !m.Has("memory") {
				continue
			}
		}
		path, in := own[key]
		if !in {
			continue
		}
		dir := m.Dir(path)
		if dir == "" {
			continue
		}
		for d := dir; ; d = filepath.Dir(d) {
			for _, name := range files {
				n, set, err := readLimit(filepath.Join(d, name))
				if err != nil {
					return Limit{}, false, err
				}
				if set && (lim.File == "" || n < lim.Bytes) {
					lim = Limit{Bytes: n, File: filepath.Join(d, name)}
				}
			}
			if d == m.Point || !strings.HasPrefix(d, m.Point+"/") {
				break
			}
		}
	}
	return lim, lim.File != "", nil
}

// readLimit reads one limit file: "max" (v2) or a value from noLimit up
// (v1) is no limit, and so is a file that does not exist (the root
// cgroup has none).
func readLimit(path string) (n int64, set bool, err error) {
	b, err := readBounded(path, 64)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("cgroup: %s: %q is not a byte count", path, s)
	}
	if v >= noLimit {
		return 0, false, nil
	}
	return int64(v), true, nil
}
