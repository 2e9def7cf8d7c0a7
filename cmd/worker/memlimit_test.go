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

// hostTree lays out a process in a cgroup v2 hierarchy below a new root,
// with memory.max max (empty: "max", no limit) and, when meminfo names a
// file of ../../internal/cgroup/testdata, that file as /proc/meminfo; it
// returns the readers of the worker's memory there.
func hostTree(t *testing.T, max, meminfo string) memorySources {
	t.Helper()
	root := t.TempDir()
	if max == "" {
		max = "max"
	}
	files := map[string]string{
		"proc/self/mountinfo": "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
		"proc/self/cgroup":    "0::/system.slice/lanefleet.service\n",
		"sys/fs/cgroup/system.slice/lanefleet.service/memory.max": max + "\n",
	}
	if meminfo != "" {
		b, err := os.ReadFile(filepath.Join("..", "..", "internal", "cgroup", "testdata", meminfo))
		if err != nil {
			t.Fatal(err)
		}
		files["proc/meminfo"] = string(b)
	}
	for p, content := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return memorySources{
		cgroup:  func() (cgroup.Limit, bool, error) { return cgroup.MemoryLimit(root) },
		machine: func() (cgroup.Limit, bool, error) { return cgroup.PhysicalMemory(root) },
	}
}

// TestMemoryLimit: --memory-limit, the cgroup's memory limit and the
// machine's memory decide the soft limit the worker sets; the default is
// GOMEMLIMIT, else 90% of the cgroup's limit, else 50% of the machine's
// memory, else none.
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	const host = 24683620 << 10 // MemTotal of testdata/meminfo-host
	for _, c := range []struct {
		name       string
		flag       string
		gomemlimit string
		cgroupMax  string // "": no cgroup limit
		meminfo    string // testdata file; "": no /proc/meminfo
		set        int64  // 0: the runtime keeps its own
		why        string
	}{
		{"default, cgroup limit: 90% of it", "", "", "2147483648", "meminfo-host", 2147483648 * 9 / 10, "90% of the cgroup memory limit 2.0 GiB (/"},
		{"default, no cgroup limit: half the machine's", "", "", "", "meminfo-host", host / 2, "50% of the machine's memory 23.5 GiB (/"},
		{"default, no cgroup limit, a 2 GB VM", "", "", "", "meminfo-2g", 2030464 << 10 / 2, "50% of the machine's memory 1.9 GiB"},
		{"default, neither: none", "", "", "", "", 0, "none (no cgroup memory limit and no /proc/meminfo; see --memory-limit)"},
		{"default, MemTotal unreadable: none", "", "", "", "meminfo-bad-total", 0, `none (the machine's memory could not be read: cgroup: `},
		{"default, no MemTotal line: none", "", "", "", "meminfo-no-total", 0, "no MemTotal line"},
		{"0 is the default", "0", "", "1073741824", "meminfo-host", 1073741824 * 9 / 10, "90% of the cgroup memory limit 1.0 GiB"},
		{"default, GOMEMLIMIT set: the runtime's", "", "1GiB", "2147483648", "meminfo-host", 0, "GOMEMLIMIT=1GiB"},
		{"default, GOMEMLIMIT set, no cgroup limit: the runtime's", "", "1GiB", "", "meminfo-host", 0, "GOMEMLIMIT=1GiB"},
		{"a size wins over the cgroup", "1536M", "", "2147483648", "meminfo-host", 1536 << 20, "--memory-limit 1.5 GiB"},
		{"a size wins over GOMEMLIMIT", "512M", "1GiB", "", "meminfo-host", 512 << 20, "--memory-limit 512.0 MiB"},
		{"a share of the cgroup's", "75%", "", "4294967296", "meminfo-host", 3 << 30, "75% of the cgroup memory limit 4.0 GiB"},
		{"a decimal share", "87.5%", "", "1073741824", "meminfo-host", 896 << 20, "87.5% of the cgroup memory limit 1.0 GiB"},
		{"a share of the machine's without a cgroup limit", "25%", "", "", "meminfo-host", host / 4, "25% of the machine's memory 23.5 GiB"},
		{"-1: none, even with GOMEMLIMIT and a cgroup limit", "-1", "1GiB", "2147483648", "meminfo-host", math.MaxInt64, "none (--memory-limit -1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l, err := parseMemoryLimit(c.flag)
			if err != nil {
				t.Fatal(err)
			}
			set, why, err := l.resolve(c.gomemlimit, hostTree(t, c.cgroupMax, c.meminfo))
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
		{"12Q", `--memory-limit "12Q": want a size such as 1536M or 2G (at least 64M), a share such as 80% (of the cgroup memory limit, else of the machine's memory), 0 for the default or -1 for none`},
		{"lots", `--memory-limit "lots": want a size`},
		{"-2", `--memory-limit "-2": want a size`},
		{"1.5G", `--memory-limit "1.5G": want a size`},
		{"10M", `--memory-limit "10M": want at least 64M`},
		{"150%", `--memory-limit "150%": a share of the worker's memory is above 0% and at most 100%`},
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

// TestMemoryLimitShareNeedsMemory: a share where neither a cgroup limit
// nor the machine's memory can be learnt is refused, saying to give a size;
// so is a share under 64M.
func TestMemoryLimitShareNeedsMemory(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		max, meminfo, want string
	}{
		{"", "", "neither a cgroup memory limit nor the machine's memory (/proc/meminfo) can be found to take a share of; give a size (e.g. 2G)"},
		{"67108864", "meminfo-host", "is 51.2 MiB: want at least 64M"},
		{"", "meminfo-bad-total", `80% of the machine's memory: cgroup: `},
	} {
		l, err := parseMemoryLimit("80%")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.resolve("", hostTree(t, c.max, c.meminfo)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("80%% of %q: %v, want it to say %q", c.max, err, c.want)
		}
	}
	// An unreadable cgroup fails a share, and leaves the default at none
	// (the machine's memory is no guide to a limit it could not read).
	broken := hostTree(t, "not-a-number", "meminfo-host")
	l, _ := parseMemoryLimit("80%")
	if _, _, err := l.resolve("", broken); err == nil || !strings.Contains(err.Error(), "is not a byte count") {
		t.Errorf("80%% of a broken cgroup: %v", err)
	}
	set, why, err := memoryLimit{}.resolve("", broken)
	if err != nil || set != 0 || !strings.Contains(why, "could not be read") {
		t.Errorf("default with a broken cgroup: set %d, %q, %v", set, why, err)
	}
}
