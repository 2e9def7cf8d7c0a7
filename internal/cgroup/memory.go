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

// PhysicalMemory is the machine's memory: MemTotal of /proc/meminfo below
// root (root "/" on the host). In a container without a memory limit that
// is the host's memory, which is what bounds the process there. ok is
// false on a system without /proc/meminfo; err says what could not be
// read or parsed.
func PhysicalMemory(root string) (lim Limit, ok bool, err error) {
	path := filepath.Join(root, "proc/meminfo")
	b, err := readBounded(path, 64<<10)
	if errors.Is(err, fs.ErrNotExist) {
		return Limit{}, false, nil
	}
	if err != nil {
		return Limit{}, false, err
	}
	n, err := parseMemTotal(b)
	if err != nil {
		return Limit{}, false, fmt.Errorf("cgroup: %s: %w", path, err)
	}
	return Limit{Bytes: n, File: path}, true, nil
}

// parseMemTotal reads the MemTotal line of /proc/meminfo
// ("MemTotal:       24683620 kB").
func parseMemTotal(b []byte) (int64, error) {
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("MemTotal %q is not a size in kB", strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 || kb > noLimit>>10 {
			return 0, fmt.Errorf("MemTotal %q is not a size in kB", strings.TrimSpace(rest))
		}
		return kb << 10, nil
	}
	return 0, errors.New("no MemTotal line")
}
