package sandbox

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the tool the tests run inside the sandbox, as
// the command, when toolEnv names what to do:
//
//	connect <path>              dial the UNIX socket at path, say hello
//	spin <threads> <duration>   spin that many threads, report CPU/wall
const toolEnv = "LANEFLEET_SANDBOX_TEST_TOOL"

// tool runs the test tool and exits when this process is one.
func tool() {
	args := strings.Fields(os.Getenv(toolEnv))
	if len(args) == 0 {
		return
	}
	code := 0
	switch args[0] {
	case "connect":
		c, err := net.Dial("unix", args[1])
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(3)
		}
		fmt.Fprintln(c, "hello")
		c.Close()
		fmt.Println("connected")
	case "spin":
		threads, _ := strconv.Atoi(args[1])
		d, _ := time.ParseDuration(args[2])
		runtime.GOMAXPROCS(threads)
		start := time.Now()
		var wg sync.WaitGroup
		for range threads {
			wg.Go(func() {
				for time.Since(start) < d {
				}
			})
		}
		wg.Wait()
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		fmt.Printf("cpu %v wall %v ratio %.2f\n", cpu, time.Since(start), cpu.Seconds()/time.Since(start).Seconds())
	default:
		fmt.Println("unknown tool", args)
		code = 2
	}
	os.Exit(code)
}

// toolBinary copies the test binary where a confined command can run it:
// the build directory is the worker's alone (0700), and commands may run
// as another uid.
func toolBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "tool")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// exitedOnly reports whether err is nil or the command's exit status only
// (not a failure to clean up after it).
func exitedOnly(err error) bool {
	_, ok := err.(*exec.ExitError)
	return err == nil || ok
}

// runTool runs the tool in ws with args and returns its output and state.
func runTool(t *testing.T, box *Sandbox, bin, ws string, args ...string) (string, *os.ProcessState) {
	t.Helper()
	var out strings.Builder
	cmd := box.Command(ws, []string{toolEnv + "=" + strings.Join(args, " ")}, bin, bin)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(t.Context()); err != nil {
		t.Fatalf("start %v: %v", args, err)
	}
	if err := cmd.Wait(); !exitedOnly(err) {
		t.Fatalf("wait %v: %v", args, err)
	}
	return out.String(), cmd.ProcessState()
}
