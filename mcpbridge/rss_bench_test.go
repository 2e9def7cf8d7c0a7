package mcpbridge_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/lanefleet/lanefleet/tools"
)

// BenchmarkBridgeRSS runs `worker mcp-bridge` (built for the benchmark)
// with 1 and with 50 stdio MCP servers (this test binary, each a process
// of its own) and reports the bridge process's own resident memory
// (VmRSS, and its peak VmHWM) once every server's tools are served and
// each has answered a call; the loop calls one tool. The servers'
// memory is theirs, not the bridge's.
func BenchmarkBridgeRSS(b *testing.B) {
	worker := filepath.Join(b.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", worker, "../cmd/worker").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 50} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			bb := setup(b)
			servers := map[string]any{}
			for i := range n {
				servers[fmt.Sprintf("s%d", i)] = map[string]any{"command": exe, "env": map[string]string{envServer: "stdio"}}
			}
			cfg, _ := json.Marshal(map[string]any{"mcpServers": servers})
			path := filepath.Join(b.TempDir(), "mcp.json")
			if err := os.WriteFile(path, cfg, 0o600); err != nil {
				b.Fatal(err)
			}
			var logs lockedBuffer
			cmd := exec.Command(worker, "mcp-bridge", "--config", path, "--nats-url", bb.url, "--log-format", "json")
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
			cmd.Stdout, cmd.Stderr = &logs, &logs
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the cleanup ends its servers too
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				_ = cmd.Wait()
			})
			nc := bb.caller(b)
			var last tools.Tool
			for i := range n {
				last = tool(b, nc, fmt.Sprintf("s%d__echo", i))
				if _, err := last.Call(b.Context(), tools.Call{ID: "c", Args: map[string]any{"q": "hi"}}); err != nil {
					b.Fatalf("s%d__echo: %v\n%s", i, err, logs.String())
				}
			}
			rss, hwm := procMemory(b, cmd.Process.Pid)
			for b.Loop() {
				if _, err := last.Call(b.Context(), tools.Call{ID: "c", Args: map[string]any{"q": "hi"}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(rss, "bridge-RSS-MB")
			b.ReportMetric(hwm, "bridge-peak-RSS-MB")
		})
	}
}

// procMemory reads a process's VmRSS and VmHWM, in MB.
func procMemory(b *testing.B, pid int) (rss, hwm float64) {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			rss = kb / 1024
		case "VmHWM":
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

// lockedBuffer is a process's output, readable while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
