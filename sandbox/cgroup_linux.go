package sandbox

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	cgfs "github.com/lanefleet/lanefleet/internal/cgroup"
)

// Each confined command runs in a cgroup of its own, so that its memory,
// processes and CPU are bounded as a whole (rlimits bound each process
// only) and every process it starts, whatever it did to leave its process
// group, is found and killed when it ends.
//
// cgroup v2 is used where the memory, pids and cpu controllers are
// delegated: in Config.Cgroup, or else beside or below the worker's own
// cgroup where they are enabled. Else cgroup v1, in the worker's own
// cgroup of each of the memory, pids and cpu hierarchies (hybrid hosts,
// older distributions). Else none: the Platform line says so and only the
// rlimits bound each process.

// controllers are the ones a command's cgroup needs.
var controllers = []string{"memory", "pids", "cpu"}

const (
	cgroupRoot   = "/sys/fs/cgroup"
	cpuPeriod    = 100_000 // µs: cpu.max's and cpu.cfs_period_us's default
	minCPUQuota  = 1_000   // µs: the kernel's least quota
	cgroupPrefix = "lanefleet-"
)

// cgroups is where commands' cgroups are made: a cgroup v2 directory, or a
// directory per controller of cgroup v1.
type cgroups struct {
	v2 string
	v1 map[string]string
}

func (c cgroups) String() string {
	if c.v2 != "" {
		return "cgroup v2 (" + c.v2 + ")"
	}
	return "cgroup v1 (" + c.v1["memory"] + ", " + c.v1["pids"] + ", " + c.v1["cpu"] + ")"
}

// cgroupCandidates lists, from the mounts and the worker's cgroups, the
// cgroup v2 directories worth trying (the worker's own cgroup, then its
// parent) and the cgroup v1 directory of each controller.
func cgroupCandidates(mounts []cgfs.Mount, own map[string]string) (v2 []string, v1 map[string]string) {
	v1 = map[string]string{}
	for _, m := range mounts {
		if m.V2() {
			path, ok := own[""]
			if !ok {
				continue
			}
			dir := m.Dir(path)
			if dir == "" {
				continue
			}
			v2 = append(v2, dir)
			if dir != m.Point {
				v2 = append(v2, filepath.Dir(dir))
			}
			continue
		}
		for _, c := range controllers {
			if !m.Has(c) {
				continue
			}
			if path, ok := own[c]; ok {
				if dir := m.Dir(path); dir != "" {
					v1[c] = dir
				}
			}
		}
	}
	return v2, v1
}

// findCgroups finds where commands' cgroups can be made: explicit (a
// cgroup v2 directory delegated to the worker) if given, else the first
// candidate that works. It returns why none does.
func findCgroups(explicit string) (cgroups, error) {
	if explicit != "" {
		if err := enableControllers(explicit); err != nil {
			return cgroups{}, fmt.Errorf("cgroup %s: %w", explicit, err)
		}
		if err := probeCgroup(cgroups{v2: explicit}); err != nil {
			return cgroups{}, fmt.Errorf("cgroup %s: %w", explicit, err)
		}
		return cgroups{v2: explicit}, nil
	}
	mounts, own, err := cgfs.Self("/")
	if err != nil {
		return cgroups{}, err
	}
	v2, v1 := cgroupCandidates(mounts, own)
	var why []string
	for _, dir := range v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			why = append(why, "v2: "+err.Error())
			continue
		}
		enabled := strings.Fields(string(b))
		if missing := slices.DeleteFunc(slices.Clone(controllers), func(c string) bool { return slices.Contains(enabled, c) }); len(missing) > 0 {
			why = append(why, fmt.Sprintf("v2: %s does not delegate %s", dir, strings.Join(missing, ", ")))
			continue
		}
		c := cgroups{v2: dir}
		if err := probeCgroup(c); err != nil {
			why = append(why, "v2: "+err.Error())
			continue
		}
		return c, nil
	}
	if len(v2) == 0 {
		why = append(why, "v2: no cgroup2 hierarchy holds this process")
	}
	if len(v1) == len(controllers) {
		c := cgroups{v1: v1}
		if err := probeCgroup(c); err != nil {
			return cgroups{}, errors.New(strings.Join(append(why, "v1: "+err.Error()), "; "))
		}
		return c, nil
	}
	var missing []string
	for _, c := range controllers {
		if v1[c] == "" {
			missing = append(missing, c)
		}
	}
	return cgroups{}, errors.New(strings.Join(append(why, "v1: no hierarchy for "+strings.Join(missing, ", ")), "; "))
}

// enableControllers enables memory, pids and cpu for the children of a
// cgroup v2 directory.
func enableControllers(dir string) error {
	var b strings.Builder
	for _, c := range controllers {
		b.WriteString(" +" + c)
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), strings.TrimSpace(b.String()))
}

// probeCgroup makes a cgroup with limits and removes it.
func probeCgroup(c cgroups) error {
	g, err := c.create(Limits{Memory: DefaultMemory, Processes: DefaultProcesses, CPUs: DefaultCPUs})
	if err != nil {
		return err
	}
	return g.remove()
}

// cgroup is one command's cgroup.
type cgroup struct {
	// mu orders kill (Cmd.Kill) and remove (Cmd.Wait), which may run at
	// once: remove empties dirs.
	mu   sync.Mutex
	dirs []string // v2: one; v1: one per controller
	v2   bool
	// fd is the cgroup v2 directory, for CLONE_INTO_CGROUP; -1 with v1.
	fd int
}

// create makes a command's cgroup with the limits.
func (c cgroups) create(l Limits) (g *cgroup, err error) {
	var name [8]byte
	rand.Read(name[:]) //nolint:errcheck // crypto/rand.Read never fails
	base := cgroupPrefix + hex.EncodeToString(name[:])
	g = &cgroup{v2: c.v2 != "", fd: -1}
	defer func() {
		if err != nil {
			g.remove() //nolint:errcheck // the error that stopped create is the one to report
		}
	}()
	mk := func(parent string) (string, error) {
		dir := filepath.Join(parent, base)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		g.dirs = append(g.dirs, dir)
		return dir, nil
	}
	quota := max(int64(math.Ceil(l.CPUs*cpuPeriod)), minCPUQuota)
	if g.v2 {
		dir, err := mk(c.v2)
		if err != nil {
			return g, err
		}
		for _, w := range []struct {
			file, value string
			optional    bool
		}{
			{"memory.max", strconv.FormatInt(l.Memory, 10), false},
			{"memory.swap.max", "0", true}, // absent without swap accounting
			{"memory.oom.group", "1", false},
			{"pids.max", strconv.Itoa(l.Processes), false},
			{"cpu.max", fmt.Sprintf("%d %d", quota, cpuPeriod), false},
		} {
			if err := writeFile(filepath.Join(dir, w.file), w.value); err != nil && !(w.optional && errors.Is(err, fs.ErrNotExist)) {
				return g, err
			}
		}
		if g.fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return g, fmt.Errorf("open %s: %w", dir, err)
		}
		return g, nil
	}
	for _, ctrl := range controllers {
		dir, err := mk(c.v1[ctrl])
		if err != nil {
			return g, err
		}
		var writes [][2]string
		switch ctrl {
		case "memory":
			writes = [][2]string{{"memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)}, {"memory.memsw.limit_in_bytes", strconv.FormatInt(l.Memory, 10)}}
		case "pids":
			writes = [][2]string{{"pids.max", strconv.Itoa(l.Processes)}}
		case "cpu":
			writes = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cpuPeriod)}, {"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)}}
		}
		for _, w := range writes {
			err := writeFile(filepath.Join(dir, w[0]), w[1])
			if err != nil && !(w[0] == "memory.memsw.limit_in_bytes" && errors.Is(err, fs.ErrNotExist)) { // no swap accounting
				return g, err
			}
		}
	}
	return g, nil
}

// add moves a process into the cgroup (cgroup v1: v2 starts it there).
func (g *cgroup) add(pid int) error {
	for _, dir := range g.dirs {
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// kill sends SIGKILL to every process of the cgroup: cgroup.kill where
// the kernel has it (v2, Linux 5.14+), else each process listed.
func (g *cgroup) kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.killLocked()
}

// killLocked is kill with g.mu held.
func (g *cgroup) killLocked() {
	if len(g.dirs) == 0 {
		return
	}
	if g.v2 {
		if err := writeFile(filepath.Join(g.dirs[0], "cgroup.kill"), "1"); err == nil {
			return
		}
	}
	procs := func() []int {
		b, _ := os.ReadFile(filepath.Join(g.dirs[0], "cgroup.procs"))
		var pids []int
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	// A pid read may be reused before it is signalled: each process is
	// held by a pidfd first, and signalled only if its pid is still in
	// the cgroup after that (then the pidfd is that process, or one that
	// is gone).
	listed := procs()
	held := map[int]int{}
	for _, pid := range listed {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			held[pid] = fd
		}
	}
	still := procs()
	for pid, fd := range held {
		if slices.Contains(still, pid) {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) //nolint:errcheck // it may be gone
		}
		unix.Close(fd)
	}
}

// empty reports whether no process is left in the cgroup.
func (g *cgroup) empty() bool {
	for _, dir := range g.dirs {
		if g.v2 {
			b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
			if err == nil && bytes.Contains(b, []byte("populated 0")) {
				continue
			}
			return false
		}
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(bytes.TrimSpace(b)) > 0 {
			return false
		}
	}
	return true
}

// cgroupDrain bounds how long remove waits for killed processes to go.
const cgroupDrain = 10 * time.Second

// remove kills what is left in the cgroup, waits for it to be empty and
// removes it. Processes killed with SIGKILL are gone within milliseconds
// (unless blocked in the kernel), and neither cgroup.procs nor cgroup v1
// say when, so it polls, from 1 ms up to 50 ms apart.
func (g *cgroup) remove() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	deadline := time.Now().Add(cgroupDrain)
	for wait := time.Millisecond; len(g.dirs) > 0 && !g.empty(); wait = min(2*wait, 50*time.Millisecond) {
		g.killLocked()
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox: processes of %s survived SIGKILL for %s", g.dirs[0], cgroupDrain)
		}
		time.Sleep(wait)
	}
	var errs []error
	for _, dir := range g.dirs {
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sandbox: remove %s: %w", dir, err))
		}
	}
	g.dirs = nil
	return errors.Join(errs...)
}

// writeFile writes a cgroup file (it exists: no create).
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}
