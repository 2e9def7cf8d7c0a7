package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path relative to root → content) below a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	v2Mount     = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	hybridMount = "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
		"31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
		"40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)

// TestMemoryLimit: the smallest limit of the process's cgroup and its
// ancestors, as hosts lay the files out.
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		want  int64  // 0: no limit
		file  string // the file that sets it, below root
		err   string
	}{{
		name: "v2, the service's own memory.max",
		files: map[string]string{"proc/self/mountinfo": v2Mount, "proc/self/cgroup": "0::/system.slice/lanefleet.service\n",
			"sys/fs/cgroup/system.slice/lanefleet.service/memory.max": "2147483648\n", "sys/fs/cgroup/system.slice/lanefleet.service/memory.high": "max\n",
			"sys/fs/cgroup/system.slice/memory.max": "max\n"},
		want: 2 << 30, file: "sys/fs/cgroup/system.slice/lanefleet.service/memory.max",
	}, {
		name: "v2, a parent's smaller limit bounds the child",
		files: map[string]string{"proc/self/mountinfo": v2Mount, "proc/self/cgroup": "0::/a/b\n",
			"sys/fs/cgroup/a/b/memory.max": "4294967296\n", "sys/fs/cgroup/a/memory.max": "1073741824\n"},
		want: 1 << 30, file: "sys/fs/cgroup/a/memory.max",
	}, {
		name: "v2, memory.high below memory.max",
		files: map[string]string{"proc/self/mountinfo": v2Mount, "proc/self/cgroup": "0::/c\n",
			"sys/fs/cgroup/c/memory.max": "1073741824\n", "sys/fs/cgroup/c/memory.high": "805306368\n"},
		want: 768 << 20, file: "sys/fs/cgroup/c/memory.high",
	}, {
		name: "v2 in a container: its own cgroup is the root (no memory.max above it)",
		files: map[string]string{"proc/self/mountinfo": v2Mount, "proc/self/cgroup": "0::/\n",
			"sys/fs/cgroup/memory.max": "536870912\n"},
		want: 512 << 20, file: "sys/fs/cgroup/memory.max",
	}, {
		name: "v2 without a limit",
		files: map[string]string{"proc/self/mountinfo": v2Mount, "proc/self/cgroup": "0::/user.slice\n",
			"sys/fs/cgroup/user.slice/memory.max": "max\n", "sys/fs/cgroup/user.slice/memory.high": "max\n"},
	}, {
		name: "hybrid: v1 memory controller with a limit",
		files: map[string]string{"proc/self/mountinfo": hybridMount, "proc/self/cgroup": "4:memory:/process_api/58908b\n1:cpu:/\n0::/\n",
			"sys/fs/cgroup/memory/process_api/58908b/memory.limit_in_bytes": "3221225472\n",
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":        "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                    "9223372036854771712\n"},
		want: 3 << 30, file: "sys/fs/cgroup/memory/process_api/58908b/memory.limit_in_bytes",
	}, {
		name: "hybrid: v1 unlimited (the largest page-aligned int64)",
		files: map[string]string{"proc/self/mountinfo": hybridMount, "proc/self/cgroup": "4:memory:/process_api/58908b\n0::/\n",
			"sys/fs/cgroup/memory/process_api/58908b/memory.limit_in_bytes": "9223372036854771712\n"},
	}, {
		name: "v1 in a container: the mount's root is its cgroup",
		files: map[string]string{"proc/self/mountinfo": "701 690 0:41 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
			"proc/self/cgroup": "3:memory:/docker/abc\n", "sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n"},
		want: 256 << 20, file: "sys/fs/cgroup/memory/memory.limit_in_bytes",
	}, {
		name:  "no cgroups (not Linux)",
		files: map[string]string{},
	}, {
		name: "a limit file that is no number",
		files: map[string]string{"proc/self/mountinfo": v2Mount, "proc/self/cgroup": "0::/d\n",
			"sys/fs/cgroup/d/memory.max": "lots\n"},
		err: `memory.max: "lots" is not a byte count`,
	}, {
		name: "a limit file that is too long",
		files: map[string]string{"proc/self/mountinfo": v2Mount, "proc/self/cgroup": "0::/d\n",
			"sys/fs/cgroup/d/memory.max": strings.Repeat("9", 100)},
		err: "longer than 64 bytes",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := tree(t, tt.files)
			lim, ok, err := MemoryLimit(root)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tt.want > 0) || lim.Bytes != tt.want {
				t.Fatalf("limit %d (set %v), want %d", lim.Bytes, ok, tt.want)
			}
			if tt.want > 0 && lim.File != filepath.Join(root, tt.file) {
				t.Errorf("set by %s, want %s", lim.File, filepath.Join(root, tt.file))
			}
		})
	}
}

// TestMountDir: a cgroup path's directory in its mount, and none outside
// the mount's root (another cgroup namespace).
func TestMountDir(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m    Mount
		path string
		want string
	}{
		{Mount{Root: "/", Point: "/sys/fs/cgroup"}, "/a/b", "/sys/fs/cgroup/a/b"},
		{Mount{Root: "/docker/abc", Point: "/sys/fs/cgroup/memory"}, "/docker/abc/sub", "/sys/fs/cgroup/memory/sub"},
		{Mount{Root: "/docker/abc", Point: "/sys/fs/cgroup/memory"}, "/docker/abc", "/sys/fs/cgroup/memory"},
		{Mount{Root: "/docker/abc", Point: "/sys/fs/cgroup/memory"}, "/docker/abcdef", ""},
		{Mount{Root: "/docker/abc", Point: "/sys/fs/cgroup/memory"}, "/other", ""},
		{Mount{Root: "/", Point: "/sys/fs/cgroup"}, "/../../etc", ""},
		{Mount{Root: "/", Point: "/sys/fs/cgroup"}, "/", "/sys/fs/cgroup"},
	} {
		if got := c.m.Dir(c.path); got != c.want {
			t.Errorf("%+v.Dir(%q) = %q, want %q", c.m, c.path, got, c.want)
		}
	}
}

// TestPhysicalMemory: MemTotal of /proc/meminfo files as hosts write them
// (testdata), and the files it refuses.
func TestPhysicalMemory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		meminfo string // a file of testdata; "": none
		want    int64  // 0: none
		err     string
	}{
		{name: "a 24 GiB host", meminfo: "meminfo-host", want: 24683620 << 10},
		{name: "a 2 GB VM", meminfo: "meminfo-2g", want: 2030464 << 10},
		{name: "no /proc/meminfo (not Linux)"},
		{name: "MemTotal that is no number", meminfo: "meminfo-bad-total", err: `MemTotal "lots kB" is not a size in kB`},
		{name: "no MemTotal line", meminfo: "meminfo-no-total", err: "no MemTotal line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			files := map[string]string{}
			if tt.meminfo != "" {
				b, err := os.ReadFile(filepath.Join("testdata", tt.meminfo))
				if err != nil {
					t.Fatal(err)
				}
				files["proc/meminfo"] = string(b)
			}
			root := tree(t, files)
			lim, ok, err := PhysicalMemory(root)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tt.want > 0) || lim.Bytes != tt.want {
				t.Fatalf("memory %d (found %v), want %d", lim.Bytes, ok, tt.want)
			}
			if tt.want > 0 && lim.File != filepath.Join(root, "proc/meminfo") {
				t.Errorf("from %s", lim.File)
			}
		})
	}
}

// TestParseMemTotal: the MemTotal line's edge cases.
func TestParseMemTotal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int64 // 0: refused
	}{
		{"MemTotal:       1024 kB\n", 1 << 20},
		{"MemFree: 5 kB\nMemTotal: 2048 kB", 2 << 20}, // not the first line, no newline at the end
		{"MemTotal: 1024 MB\n", 0},                    // a unit the kernel never writes
		{"MemTotal: 1024\n", 0},                       // no unit
		{"MemTotal: -1 kB\n", 0},
		{"MemTotal: 0 kB\n", 0},
		{"MemTotal: 99999999999999999999 kB\n", 0}, // beyond int64
		{"MemTotal: 9007199254740992 kB\n", 0},     // 8 EiB: would overflow in bytes
		{"", 0},
	} {
		got, err := parseMemTotal([]byte(c.in))
		if got != c.want || (err != nil) != (c.want == 0) {
			t.Errorf("parseMemTotal(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}
