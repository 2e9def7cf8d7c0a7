package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/lanefleet/lanefleet/internal/cgroup"
)

// Soft memory limit (--memory-limit): the Go runtime collects more often as
// the process nears it, instead of letting the heap grow to GOGC's target,
// so a worker stays under the memory it has rather than being killed (or
// swapping) for it. It is soft: a live heap larger than the limit is not
// refused (the collector then runs as often as it may, at most half the
// CPU).
const (
	// cgroupLimitPercent is the part of the cgroup's memory limit a worker
	// takes by default: the rest is for what the Go runtime does not count
	// (the binary, the kernel's page cache of the store charged to the
	// cgroup, thread stacks).
	cgroupLimitPercent = 90
	// machineLimitPercent is the part of the machine's memory a worker
	// outside a memory-limited cgroup takes by default: the machine is
	// not the worker's alone (the kernel, the page cache that serves the
	// store's reads, other processes), and a limit that binds only when a
	// machine is nearly full keeps the runtime from growing the heap into
	// swap or the OOM killer.
	machineLimitPercent = 50
	// minMemoryLimit is the least limit given in bytes: a worker's heap at
	// rest is tens of megabytes, and under this the collector would run
	// without pause.
	minMemoryLimit = 64 << 20
)

// memoryLimit is a --memory-limit value.
type memoryLimit struct {
	bytes   int64   // > 0: this many bytes
	percent float64 // > 0: this percentage of the worker's memory (memorySources.has)
	none    bool    // -1: no limit, whatever GOMEMLIMIT and the cgroup say
	// all zero: the default (GOMEMLIMIT if set, else cgroupLimitPercent
	// of the cgroup's limit, else machineLimitPercent of the machine's
	// memory, else none)
}

// memoryLimitHelp is what --memory-limit allows.
const memoryLimitHelp = "a size such as 1536M or 2G (at least 64M), a share such as 80% (of the cgroup memory limit, else of the machine's memory), 0 for the default or -1 for none"

// parseMemoryLimit reads a --memory-limit value.
func parseMemoryLimit(s string) (memoryLimit, error) {
	bad := fmt.Errorf("--memory-limit %q: want %s", s, memoryLimitHelp)
	t := strings.TrimSpace(s)
	if len(t) > 32 {
		return memoryLimit{}, fmt.Errorf("--memory-limit %q…: want %s", t[:32], memoryLimitHelp)
	}
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(v) || v <= 0 || v > 100 {
			return memoryLimit{}, fmt.Errorf("--memory-limit %q: a share of the worker's memory is above 0%% and at most 100%%", s)
		}
		return memoryLimit{percent: v}, nil
	}
	switch t {
	case "", "0":
		return memoryLimit{}, nil
	case "-1":
		return memoryLimit{none: true}, nil
	}
	n, err := parseSize(t)
	if err != nil || n <= 0 {
		return memoryLimit{}, bad
	}
	if n < minMemoryLimit {
		return memoryLimit{}, fmt.Errorf("--memory-limit %q: want at least 64M (under that the collector runs without pause), or -1 for no limit", s)
	}
	return memoryLimit{bytes: n}, nil
}

// memoryReader reads a memory bound of the process: its cgroup's memory
// limit (cgroup.MemoryLimit) or the machine's memory
// (cgroup.PhysicalMemory). ok is false when there is none.
type memoryReader func() (lim cgroup.Limit, ok bool, err error)

// memorySources is where the worker learns how much memory it has.
type memorySources struct {
	cgroup  memoryReader
	machine memoryReader
}

// hostMemory reads the running host's cgroup and /proc/meminfo.
var hostMemory = memorySources{
	cgroup:  func() (cgroup.Limit, bool, error) { return cgroup.MemoryLimit("/") },
	machine: func() (cgroup.Limit, bool, error) { return cgroup.PhysicalMemory("/") },
}

// memoryBound is the memory the worker has, and where that is said.
type memoryBound struct {
	cgroup.Limit
	what  string  // for people: "the cgroup memory limit" or "the machine's memory"
	share float64 // the percentage of it the default takes
}

// has is the memory the worker has: its cgroup's memory limit when one is
// set, else the machine's memory. ok is false when neither can be learnt;
// err names what could not be read.
func (m memorySources) has() (b memoryBound, ok bool, err error) {
	b = memoryBound{what: "the cgroup memory limit", share: cgroupLimitPercent}
	if b.Limit, ok, err = m.cgroup(); err != nil || ok {
		return b, ok, err
	}
	b = memoryBound{what: "the machine's memory", share: machineLimitPercent}
	b.Limit, ok, err = m.machine()
	return b, ok, err
}

// resolve decides the soft memory limit to set: set is 0 when the runtime
// keeps what it has (GOMEMLIMIT, or none), math.MaxInt64 for none; why says
// where it comes from, for the log. gomemlimit is the GOMEMLIMIT variable,
// which the runtime has applied already. What cannot be read fails only a
// limit given as a share; the default then sets none and says why.
func (l memoryLimit) resolve(gomemlimit string, src memorySources) (set int64, why string, err error) {
	switch {
	case l.none:
		return math.MaxInt64, "none (--memory-limit -1)", nil
	case l.bytes > 0:
		return l.bytes, "--memory-limit " + sizeText(l.bytes), nil
	case l.percent > 0:
		b, ok, err := src.has()
		if err != nil {
			return 0, "", fmt.Errorf("--memory-limit %s%% of %s: %w", pct(l.percent), b.what, err)
		}
		if !ok {
			return 0, "", fmt.Errorf("--memory-limit %s%%: neither a cgroup memory limit nor the machine's memory (/proc/meminfo) can be found to take a share of; give a size (e.g. 2G)", pct(l.percent))
		}
		n := int64(float64(b.Bytes) * l.percent / 100)
		if n < minMemoryLimit {
			return 0, "", fmt.Errorf("--memory-limit %s%% of %s %s (%s) is %s: want at least 64M", pct(l.percent), b.what, sizeText(b.Bytes), b.File, sizeText(n))
		}
		return n, fmt.Sprintf("%s%% of %s %s (%s)", pct(l.percent), b.what, sizeText(b.Bytes), b.File), nil
	}
	if gomemlimit != "" {
		return 0, "GOMEMLIMIT=" + gomemlimit, nil
	}
	b, ok, err := src.has()
	if err != nil {
		return 0, fmt.Sprintf("none (%s could not be read: %v)", b.what, err), nil
	}
	if !ok {
		return 0, "none (no cgroup memory limit and no /proc/meminfo; see --memory-limit)", nil
	}
	n := int64(float64(b.Bytes) * b.share / 100)
	return n, fmt.Sprintf("%s%% of %s %s (%s)", pct(b.share), b.what, sizeText(b.Bytes), b.File), nil
}

// pct formats a percentage without trailing zeros.
func pct(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

// sizeText is a byte count for people: MiB or GiB with one decimal.
func sizeText(n int64) string {
	if n >= 1<<30 {
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}
