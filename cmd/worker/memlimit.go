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
// so a worker in a container stays under the container's limit rather than
// being killed by it. It is soft: a live heap larger than the limit is not
// refused (the collector then runs as often as it may, at most half the
// CPU).
const (
	// memoryLimitPercent is the part of the cgroup's memory limit a worker
	// takes by default: the rest is for what the Go runtime does not count
	// (the binary, the kernel's page cache of the store charged to the
	// cgroup, thread stacks).
	memoryLimitPercent = 90
	// minMemoryLimit is the least limit given in bytes: a worker's heap at
	// rest is tens of megabytes, and under this the collector would run
	// without pause.
	minMemoryLimit = 64 << 20
)

// memoryLimit is a --memory-limit value.
type memoryLimit struct {
	bytes   int64   // > 0: this many bytes
	percent float64 // > 0: this percentage of the cgroup's memory limit
	none    bool    // -1: no limit, whatever GOMEMLIMIT and the cgroup say
	// all zero: the default (GOMEMLIMIT if set, else memoryLimitPercent
	// of the cgroup's limit, else none)
}

// memoryLimitHelp is what --memory-limit allows.
const memoryLimitHelp = "a size such as 1536M or 2G (at least 64M), a share of the cgroup memory limit such as 80%, 0 for the default or -1 for none"

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
			return memoryLimit{}, fmt.Errorf("--memory-limit %q: a share of the cgroup memory limit is above 0%% and at most 100%%", s)
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

// cgroupLimit reads the memory limit of the process's cgroup.
type cgroupLimit func() (cgroup.Limit, bool, error)

// resolve decides the soft memory limit to set: set is 0 when the runtime
// keeps what it has (GOMEMLIMIT, or none), math.MaxInt64 for none; why says
// where it comes from, for the log. gomemlimit is the GOMEMLIMIT variable,
// which the runtime has applied already. An unreadable cgroup fails only a
// limit given as a share of it; the default then sets none and says why.
func (l memoryLimit) resolve(gomemlimit string, cg cgroupLimit) (set int64, why string, err error) {
	switch {
	case l.none:
		return math.MaxInt64, "none (--memory-limit -1)", nil
	case l.bytes > 0:
		return l.bytes, "--memory-limit " + sizeText(l.bytes), nil
	case l.percent > 0:
		lim, ok, err := cg()
		if err != nil {
			return 0, "", fmt.Errorf("--memory-limit %s%% of the cgroup memory limit: %w", pct(l.percent), err)
		}
		if !ok {
			return 0, "", fmt.Errorf("--memory-limit %s%%: this worker's cgroup has no memory limit to take a share of; give a size (e.g. 2G)", pct(l.percent))
		}
		n := int64(float64(lim.Bytes) * l.percent / 100)
		if n < minMemoryLimit {
			return 0, "", fmt.Errorf("--memory-limit %s%% of the cgroup memory limit %s (%s) is %s: want at least 64M", pct(l.percent), sizeText(lim.Bytes), lim.File, sizeText(n))
		}
		return n, fmt.Sprintf("%s%% of the cgroup memory limit %s (%s)", pct(l.percent), sizeText(lim.Bytes), lim.File), nil
	}
	if gomemlimit != "" {
		return 0, "GOMEMLIMIT=" + gomemlimit, nil
	}
	lim, ok, err := cg()
	if err != nil {
		return 0, fmt.Sprintf("none (the cgroup memory limit could not be read: %v)", err), nil
	}
	if !ok {
		return 0, "none (no cgroup memory limit; see --memory-limit)", nil
	}
	n := int64(float64(lim.Bytes) * memoryLimitPercent / 100)
	return n, fmt.Sprintf("%s%% of the cgroup memory limit %s (%s)", pct(memoryLimitPercent), sizeText(lim.Bytes), lim.File), nil
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
