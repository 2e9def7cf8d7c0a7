package sandbox

import (
	"maps"
	"slices"
	"testing"

	cgfs "github.com/lanefleet/lanefleet/internal/cgroup"
)

// TestCgroupCandidates: where commands' cgroups are tried, from
// /proc/self/mountinfo and /proc/self/cgroup as three kinds of host show
// them.
func TestCgroupCandidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, mountinfo, cgroup string
		v2                      []string
		v1                      map[string]string
	}{{
		name: "hybrid: v1 controllers, a v2 hierarchy without them",
		mountinfo: `31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
26 1 254:0 / / rw,relatime - ext4 /dev/vda rw`,
		cgroup: `8:pids:/
4:memory:/process_api/58908b
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/`,
		v2: []string{"/sys/fs/cgroup/unified"},
		v1: map[string]string{"cpu": "/sys/fs/cgroup/cpu", "memory": "/sys/fs/cgroup/memory/process_api/58908b", "pids": "/sys/fs/cgroup/pids"},
	}, {
		name:      "v2 under systemd: the service's cgroup, then its slice",
		mountinfo: `30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot`,
		cgroup:    "0::/system.slice/lanefleet.service\n",
		v2:        []string{"/sys/fs/cgroup/system.slice/lanefleet.service", "/sys/fs/cgroup/system.slice"},
		v1:        map[string]string{},
	}, {
		name: "v1 combined cpu,cpuacct, in a container (the mount's root is its cgroup)",
		mountinfo: `700 690 0:40 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
701 690 0:41 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
702 690 0:42 /docker/abc /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids`,
		cgroup: "4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc/sub\n2:pids:/docker/abcdef\n",
		v1:     map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "memory": "/sys/fs/cgroup/memory/sub"},
	}, {
		name:      "a mount point with a space (octal escape)",
		mountinfo: `40 30 0:37 / /sys/fs/cgroup/my\040unified rw - cgroup2 cgroup2 rw`,
		cgroup:    "0::/\n",
		v2:        []string{"/sys/fs/cgroup/my unified"},
		v1:        map[string]string{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v2, v1 := cgroupCandidates(cgfs.ParseMountinfo([]byte(tt.mountinfo)), cgfs.ParseProcCgroup([]byte(tt.cgroup)))
			if !slices.Equal(v2, tt.v2) || !maps.Equal(v1, tt.v1) {
				t.Fatalf("v2 %q v1 %q, want %q %q", v2, v1, tt.v2, tt.v1)
			}
		})
	}
}
