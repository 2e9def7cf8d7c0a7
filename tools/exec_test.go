//go:build unix

package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestExec(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.file("data.txt", "from the workspace\n")
	tests := []struct {
		name, command string
		want          string
		exitCode      int64
	}{
		{"echo", "echo hello", "hello\n\nCommand exited with code 0.", 0},
		{"no output", "true", "(no output)\n\nCommand exited with code 0.", 0},
		{"exit code", "echo out; exit 3", "out\n\nCommand exited with code 3.", 3},
		{"stderr merged in order", "echo one; echo two >&2; echo three", "one\ntwo\nthree\n\nCommand exited with code 0.", 0},
		{"runs in the workspace", "cat data.txt", "from the workspace\n\nCommand exited with code 0.", 0},
		{"exact environment", `echo "$LANG ${HOME-nohome} ${USER-nouser}"`, "C nohome nouser\n\nCommand exited with code 0.", 0},
		{"stdin is empty", "cat; echo done", "done\n\nCommand exited with code 0.", 0},
		{"command not found", "no-such-command-xyz", "not found", 127},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := f.mustCall("exec", map[string]any{"command": tt.command})
			if got := text(res); tt.exitCode == 127 && !strings.Contains(got, tt.want) || tt.exitCode != 127 && got != tt.want {
				t.Fatalf("text %q, want %q", got, tt.want)
			}
			if res.Details["exitCode"] != tt.exitCode || res.IsError != (tt.exitCode != 0) {
				t.Fatalf("isError %v, details %v", res.IsError, res.Details)
			}
			if res.Details["timedOut"] != false || res.Details["aborted"] != false {
				t.Fatalf("details %v", res.Details)
			}
		})
	}
}

func TestExecWorkingDirectory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res := f.mustCall("exec", map[string]any{"command": "pwd -P"})
	real, err := filepath.EvalSymlinks(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.SplitN(text(res), "\n", 2)[0]; got != real {
		t.Fatalf("pwd = %q, want %q", got, real)
	}
	wd, _ := os.Getwd()
	if wd == real {
		t.Fatal("the process's working directory must not change")
	}
}

func TestExecSignal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	res := f.mustCall("exec", map[string]any{"command": "echo before; kill -KILL $$"})
	if !res.IsError || res.Details["signal"] != "SIGKILL" || !strings.HasSuffix(text(res), "Command was killed by signal SIGKILL.") {
		t.Fatalf("%q %v", text(res), res.Details)
	}
}

// pidAlive reports whether pid still runs (and is not a zombie).
func pidAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return err == nil // no /proc: trust kill(0)
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for pidAlive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck
			t.Fatalf("process %d survived", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, f *fixture, name string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(f.content(name)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestExecTimeoutKillsGroup: a timeout kills the shell and its background
// children, and returns what was printed.
func TestExecTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	start := time.Now()
	res := f.mustCall("exec", map[string]any{"command": "sleep 30 & echo $! > bg.pid; echo started; sleep 30", "timeout": "0.5"})
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v", took)
	}
	want := "started\n\nCommand timed out after 0.5s; its process group was killed."
	if text(res) != want || !res.IsError || res.Details["timedOut"] != true || res.Details["exitCode"] != int64(-1) {
		t.Fatalf("%q %v", text(res), res.Details)
	}
	waitDead(t, readPid(t, f, "bg.pid"))
}

// TestExecAbortKillsGroup: cancelling ctx kills the group too.
func TestExecAbortKillsGroup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	res, err := f.callCtx(ctx, "exec", map[string]any{"command": "sleep 30 & echo $! > bg.pid; sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v", took)
	}
	if !res.IsError || res.Details["aborted"] != true || !strings.HasSuffix(text(res), "Command aborted; its process group was killed.") {
		t.Fatalf("%q %v", text(res), res.Details)
	}
	waitDead(t, readPid(t, f, "bg.pid"))

	// Already cancelled: nothing starts.
	_, err = f.callCtx(ctx, "exec", map[string]any{"command": "touch started"})
	wantErr(t, err, "not started")
	if _, err := os.Stat(filepath.Join(f.dir, "started")); err == nil {
		t.Fatal("a command ran after the abort")
	}
}

// TestExecBackgroundSurvivesNormalExit: a process the command leaves in the
// background does not hold the call beyond the drain grace.
func TestExecBackgroundSurvivesNormalExit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	start := time.Now()
	res := f.mustCall("exec", map[string]any{"command": "sleep 30 & echo $! > bg.pid; echo done"})
	took := time.Since(start)
	pid := readPid(t, f, "bg.pid")
	defer syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck
	if took > 3*time.Second {
		t.Fatalf("took %v", took)
	}
	if got := text(res); !strings.HasPrefix(got, "done\n") || !strings.Contains(got, "background process") || res.IsError {
		t.Fatalf("%q", got)
	}
	if !pidAlive(pid) {
		t.Fatal("the background process was killed after a normal exit")
	}
	// With its output redirected, a background process costs no grace.
	res = f.mustCall("exec", map[string]any{"command": "sleep 30 >/dev/null 2>&1 & echo $! > bg2.pid"})
	defer syscall.Kill(readPid(t, f, "bg2.pid"), syscall.SIGKILL) //nolint:errcheck
	if strings.Contains(text(res), "background") {
		t.Fatalf("waited for a process that does not hold the output: %q", text(res))
	}
}

func TestExecTimeoutArg(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.MaxExecTimeout = 2 * time.Second; w.ExecTimeout = time.Second })
	res := f.mustCall("exec", map[string]any{"command": "echo ok", "timeout": 3600})
	if got := text(res); !strings.Contains(got, "[timeout 3600s capped at the maximum of 2s]") || res.IsError {
		t.Fatalf("%q", got)
	}
	start := time.Now()
	res = f.mustCall("exec", map[string]any{"command": "sleep 10"}) // the default timeout applies
	if took := time.Since(start); took > 5*time.Second || res.Details["timedOut"] != true || !strings.Contains(text(res), "after 1s") {
		t.Fatalf("took %v: %q", took, text(res))
	}
}

func TestExecOutputCap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.MaxOutputBytes = 1000 })
	res := f.mustCall("exec", map[string]any{"command": "i=0; while [ $i -lt 5000 ]; do echo \"line $i\"; i=$((i+1)); done"})
	got := text(res)
	if len(got) > 1400 {
		t.Fatalf("output is %d bytes", len(got))
	}
	if !strings.HasPrefix(got, "line 0\nline 1\n") || !strings.Contains(got, "line 4999\n\nCommand exited with code 0.") {
		t.Fatalf("head or tail missing:\n%s", got)
	}
	if !strings.Contains(got, "omitted") || res.Details["truncated"] != true || res.Details["outputBytes"] != int64(48890) {
		t.Fatalf("no truncation notice: %v\n%s", res.Details, got)
	}
	// Huge output of one line, with invalid UTF-8: still within the cap
	// and valid text.
	res = f.mustCall("exec", map[string]any{"command": "head -c 3000000 /dev/zero | tr '\\0' '\\377'"})
	if got := text(res); len(got) > 1400 || !strings.Contains(got, "\uFFFD") || !strings.Contains(got, "2.9MB total") {
		t.Fatalf("%d bytes: %q", len(got), got)
	}
}

// TestExecUpdates: partial output arrives while the command runs, at most
// every ~100 ms, and never after Call returned.
func TestExecUpdates(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tool, _ := f.tools.Lookup("exec")
	var (
		mu    sync.Mutex
		times []time.Time
		texts []string
	)
	res, err := tool.Call(context.Background(), Call{
		Args: map[string]any{"command": "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do echo tick $i; sleep 0.03; done"},
		Update: func(p Result) {
			mu.Lock()
			defer mu.Unlock()
			times = append(times, time.Now())
			texts = append(texts, text(p))
		},
	})
	if err != nil || res.IsError {
		t.Fatalf("%v %q", err, text(res))
	}
	mu.Lock()
	n := len(times)
	mu.Unlock()
	if n < 2 {
		t.Fatalf("%d updates", n)
	}
	for i := 1; i < n; i++ {
		if d := times[i].Sub(times[i-1]); d < 80*time.Millisecond {
			t.Errorf("updates %d and %d only %v apart", i-1, i, d)
		}
	}
	for i := 1; i < n; i++ {
		if !strings.HasPrefix(texts[i], texts[i-1]) || !strings.HasPrefix(texts[i], "tick 1\n") {
			t.Fatalf("partial outputs do not grow: %q then %q", texts[i-1], texts[i])
		}
	}
	time.Sleep(3 * updateInterval)
	mu.Lock()
	defer mu.Unlock()
	if len(times) != n {
		t.Fatal("Update was called after Call returned")
	}
}

func TestExecParallel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			n := strconv.Itoa(i)
			res, err := f.call("exec", map[string]any{"command": "echo " + n + " > f" + n + "; cat f" + n})
			if err != nil || !strings.HasPrefix(text(res), n+"\n") {
				t.Errorf("%d: %q %v", i, text(res), err)
			}
		})
	}
	wg.Wait()
}

func TestExecBadShell(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.Shell = "/nonexistent/sh" })
	_, err := f.call("exec", map[string]any{"command": "true"})
	wantErr(t, err, "cannot start the command")
}

func TestHeadTail(t *testing.T) {
	t.Parallel()
	o := newHeadTail(10)
	for _, s := range []string{"abc", "defgh", "ij"} { // exactly at the cap
		o.Write([]byte(s)) //nolint:errcheck
	}
	if s, tr, n := o.snapshot(); s != "abcdefghij" || tr || n != 10 {
		t.Fatalf("%q %v %d", s, tr, n)
	}
	o.Write([]byte("klmnopqrstuvwxyz")) //nolint:errcheck
	s, tr, n := o.snapshot()
	if !tr || n != 26 || !strings.HasPrefix(s, "abcde\n[... 16B omitted") || !strings.HasSuffix(s, "...]\nvwxyz") {
		t.Fatalf("%q %v %d", s, tr, n)
	}
	// Many small writes keep the tail exact.
	o = newHeadTail(8)
	for i := range 1000 {
		o.Write([]byte{byte('a' + i%26)}) //nolint:errcheck
	}
	want := string([]byte{'a' + 996%26, 'a' + 997%26, 'a' + 998%26, 'a' + 999%26})
	if s, _, _ := o.snapshot(); !strings.HasPrefix(s, "abcd\n") || !strings.HasSuffix(s, "\n"+want) {
		t.Fatalf("%q, want head abcd and tail %q", s, want)
	}
	// Cuts never split a character.
	o = newHeadTail(8)
	o.Write([]byte(strings.Repeat("é", 20))) //nolint:errcheck
	if s, _, _ := o.snapshot(); strings.Contains(s, "\uFFFD") {
		t.Fatalf("split character: %q", s)
	}
}
