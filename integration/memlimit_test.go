package integration

import (
	"strings"
	"testing"
)

// TestWorkerMemoryLimit: the worker process runs under the soft memory
// limit --memory-limit gives, or GOMEMLIMIT when it gives none; its start
// line says the limit the runtime now has (read back from it) and where it
// came from.
func TestWorkerMemoryLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"flag", []string{"GOMEMLIMIT=1GiB"}, []string{"--memory-limit", "300M"}, `"from":"--memory-limit 300.0 MiB","memory_limit_bytes":314572800`},
		{"env", []string{"LANEFLEET_MEMORY_LIMIT=256M"}, nil, `"memory_limit_bytes":268435456`},
		{"GOMEMLIMIT", []string{"GOMEMLIMIT=200MiB"}, nil, `"from":"GOMEMLIMIT=200MiB","memory_limit_bytes":209715200`},
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
			if !strings.Contains(line, c.want) {
				t.Fatalf("start line %q, want it to say %s", line, c.want)
			}
		})
	}
}
