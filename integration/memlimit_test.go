package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/internal/cgroup"
)

// TestWorkerMemoryLimit: the worker process runs under the soft memory
// limit --memory-limit gives, or GOMEMLIMIT when it gives none, else 90%
// of its cgroup's memory limit, else half the machine's memory; its start
// line says the limit the runtime now has (read back from it) and where it
// came from.
func TestWorkerMemoryLimit(t *testing.T) {
	t.Parallel()
	// The default on this host, by the readers the worker uses.
	var from string
	var bytes int64
	if lim, ok, err := cgroup.MemoryLimit("/"); err != nil {
		t.Fatal(err)
	} else if ok {
		from, bytes = "90% of the cgroup memory limit ", int64(float64(lim.Bytes)*90/100)
	} else if mem, ok, err := cgroup.PhysicalMemory("/"); err != nil || !ok {
		t.Fatalf("neither a cgroup limit nor the machine's memory: %v", err)
	} else {
		from, bytes = "50% of the machine's memory ", int64(float64(mem.Bytes)*50/100)
	}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"flag", []string{"GOMEMLIMIT=1GiB"}, []string{"--memory-limit", "300M"}, `"from":"--memory-limit 300.0 MiB","memory_limit_bytes":314572800`},
		{"env", []string{"LANEFLEET_MEMORY_LIMIT=256M"}, nil, `"memory_limit_bytes":268435456`},
		{"GOMEMLIMIT", []string{"GOMEMLIMIT=200MiB"}, nil, `"from":"GOMEMLIMIT=200MiB","memory_limit_bytes":209715200`},
		{"default", []string{"GOMEMLIMIT=", "LANEFLEET_MEMORY_LIMIT="}, nil, fmt.Sprintf(`"memory_limit_bytes":%d`, bytes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := workerProcess(t, c.env, append([]string{"--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, c.args...)...)
			w.waitReady(t)
			if err := w.stop(t); err != nil {
				t.Fatalf("worker: %v", err)
			}
			var line string
			for l := range strings.SplitSeq(w.logs.String(), "\n") {
				if strings.Contains(l, `"message":"soft memory limit"`) {
					line = l
				}
			}
			if !strings.Contains(line, c.want) || (c.name == "default" && !strings.Contains(line, `"from":"`+from)) {
				t.Fatalf("start line %q, want it to say %s", line, c.want)
			}
		})
	}
}
