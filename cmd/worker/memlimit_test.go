package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/internal/cgroup"
)

// cgroupTree lays out a process in a cgroup v2 hierarchy below a new root,
// with memory.max max (empty: "max", no limit), and returns the reader of
// its memory limit.
func cgroupTree(t *testing.T, max string) cgroupLimit {
	t.Helper()
	root := t.TempDir()
	if max == "" {
		max = "max"
	}
	for p, content := range map[string]string{
		"proc/self/mountinfo": "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
		"proc/self/cgroup":    "0::/system.slice/lanefleet.service\n",
		"sys/fs/cgroup/system.slice/lanefleet.service/memory.max": max + "\n",
	} {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return func() (cgroup.Limit, bool, error) { return cgroup.MemoryLimit(root) }
}

// TestMemoryLimit: --memory-limit and the cgroup's memory limit decide the
// soft limit the worker sets; the default is GOMEMLIMIT, else 90% of the
// cgroup's limit, else none.
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		flag       string
		gomemlimit string
		cgroupMax  string // "": no cgroup limit
		set        int64  // 0: the runtime keeps its own
		why        string
	}{
		{"default, cgroup limit: 90% of it", "", "", "2147483648", 2147483648 * 9 / 10, "90% of the cgroup memory limit 2.0 GiB (/"},
		{"default, no cgroup limit: none", "", "", "", 0, "none (no cgroup memory limit; see --memory-limit)"},
		{"0 is the default", "0", "", "1073741824", 1073741824 * 9 / 10, "90% of the cgroup memory limit 1.0 GiB"},
		{"default, GOMEMLIMIT set: the runtime's", "", "1GiB", "2147483648", 0, "GOMEMLIMIT=1GiB"},
		{"a size wins over the cgroup", "1536M", "", "2147483648", 1536 << 20, "--memory-limit 1.5 GiB"},
		{"a size wins over GOMEMLIMIT", "512M", "1GiB", "", 512 << 20, "--memory-limit 512.0 MiB"},
		{"a share of the cgroup's", "75%", "", "4294967296", 3 << 30, "75% of the cgroup memory limit 4.0 GiB"},
		{"a decimal share", "87.5%", "", "1073741824", 896 << 20, "87.5% of the cgroup memory limit 1.0 GiB"},
		{"-1: none, even with GOMEMLIMIT and a cgroup limit", "-1", "1GiB", "2147483648", math.MaxInt64, "none (--memory-limit -1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l, err := parseMemoryLimit(c.flag)
			if err != nil {
				t.Fatal(err)
			}
			set, why, err := l.resolve(c.gomemlimit, cgroupTree(t, c.cgroupMax))
			if err != nil {
				t.Fatal(err)
			}
			if set != c.set || !strings.Contains(why, c.why) {
				t.Errorf("set %d (%s), want %d (%s)", set, why, c.set, c.why)
			}
		})
	}
}

// TestMemoryLimitRefused: a --memory-limit the worker cannot mean is
// refused at start, exit 2, saying what is allowed.
func TestMemoryLimitRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		flag string
		want string
	}{
		{"12Q", `--memory-limit "12Q": want a size such as 1536M or 2G (at least 64M), a share of the cgroup memory limit such as 80%, 0 for the default or -1 for none`},
		{"lots", `--memory-limit "lots": want a size`},
		{"-2", `--memory-limit "-2": want a size`},
		{"1.5G", `--memory-limit "1.5G": want a size`},
		{"10M", `--memory-limit "10M": want at least 64M`},
		{"150%", `--memory-limit "150%": a share of the cgroup memory limit is above 0% and at most 100%`},
		{"0%", `above 0%`},
		{"NaN%", `above 0%`},
		{"%", `above 0%`},
		{strings.Repeat("9", 100), `want a size`},
	} {
		if _, err := parseMemoryLimit(c.flag); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want it to say %q", c.flag, err, c.want)
		}
		// The worker stops before it starts anything, as for every flag
		// out of range (it would join a URL where nothing listens).
		var out, errb bytes.Buffer
		err := runEnv([]string{"--nats-url", "nats://127.0.0.1:1", "--scripted", "--memory-limit", c.flag}, nil, &out, &errb)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("worker --memory-limit %q: exit %d (%v), want %d saying %q", c.flag, exitCode(err), err, exitUsage, c.want)
		}
	}
	// The environment's value is checked as the flag's.
	var out, errb bytes.Buffer
	err := runEnv([]string{"--nats-url", "nats://127.0.0.1:1", "--scripted"}, map[string]string{"LANEFLEET_MEMORY_LIMIT": "huge"}, &out, &errb)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), `--memory-limit "huge"`) {
		t.Errorf("LANEFLEET_MEMORY_LIMIT=huge: exit %d (%v), want %d", exitCode(err), err, exitUsage)
	}
}

// TestMemoryLimitShareNeedsCgroup: a share of the cgroup's limit where
// there is none is refused, saying to give a size.
func TestMemoryLimitShareNeedsCgroup(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		max, want string
	}{
		{"", "has no memory limit to take a share of; give a size (e.g. 2G)"},
		{"67108864", "is 51.2 MiB: want at least 64M"},
	} {
		l, err := parseMemoryLimit("80%")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.resolve("", cgroupTree(t, c.max)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("80%% of %q: %v, want it to say %q", c.max, err, c.want)
		}
	}
	// An unreadable cgroup fails a share, and leaves the default at none.
	broken := cgroupTree(t, "not-a-number")
	l, _ := parseMemoryLimit("80%")
	if _, _, err := l.resolve("", broken); err == nil || !strings.Contains(err.Error(), "is not a byte count") {
		t.Errorf("80%% of a broken cgroup: %v", err)
	}
	set, why, err := memoryLimit{}.resolve("", broken)
	if err != nil || set != 0 || !strings.Contains(why, "could not be read") {
		t.Errorf("default with a broken cgroup: set %d, %q, %v", set, why, err)
	}
}
