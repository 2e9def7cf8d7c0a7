//go:build linux

package tools

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/mustrun"
	"github.com/lanefleet/lanefleet/sandbox"
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

// TestExecSignal: a shell killed by a signal is reported with it. Run
// unconfined: a confined shell is its PID namespace's init, which signals
// from inside the namespace do not kill.
func TestExecSignal(t *testing.T) {
	t.Parallel()
	_, unconfined := boxes(t)
	f := newFixtureBox(t, unconfined)
	res := f.mustCall("exec", map[string]any{"command": "echo before; kill -KILL $$"})
	if !res.IsError || res.Details["signal"] != "SIGKILL" || !strings.HasSuffix(text(res), "Command was killed by signal SIGKILL.") {
		t.Fatalf("%q %v", text(res), res.Details)
	}
}

// marked returns the host pids of the live processes whose command line
// has marker as a word (an argument, or a word of a shell's script). A
// substring would do not: the 6-digit marker turned up inside other
// processes' arguments (go-build1502445333 directories of compiles running
// beside the test), so TestExecAbortKillsTree saw "its sleeps" before its
// command started, aborted it, and failed with "command not started".
func marked(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && hasWord(b, marker) && pidAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hasWord reports whether the NUL-separated command line cmdline has word
// as one of its arguments' space-separated words.
func hasWord(cmdline []byte, word string) bool {
	for arg := range strings.SplitSeq(string(cmdline), "\x00") {
		if slices.Contains(strings.Fields(arg), word) {
			return true
		}
	}
	return false
}

// pidAlive reports whether pid still runs (and is not a zombie).
func pidAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}

// waitGone waits until no live process carries marker.
func waitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		pids := marked(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range pids {
				syscall.Kill(p, syscall.SIGKILL) //nolint:errcheck
			}
			t.Fatalf("processes %v survived", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitMarked waits until n processes carry marker, up to a minute; it reports
// whether they did.
func waitMarked(marker string, n int) bool {
	for deadline := time.Now().Add(time.Minute); len(marked(marker)) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// sleepMarker is a sleep duration no other process uses, so that the test
// finds its sleeps in /proc whatever PID namespace they run in.
func sleepMarker() string { return strconv.Itoa(100000 + rand.IntN(800000)) }

// TestExecTimeoutKillsTree: a timeout kills the shell, its background
// children and (with a PID namespace) a setsid grandchild, and returns
// what was printed.
func TestExecTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	confined, _ := boxes(t)
	f := newFixture(t)
	m := sleepMarker()
	command := "sleep " + m + " & echo started; sleep " + m
	if confined != nil && confined.Platform().Namespaces {
		command = "setsid sleep " + m + " & " + command
	}
	start := time.Now()
	// 5 s: under load the shell may take seconds to echo "started".
	res := f.mustCall("exec", map[string]any{"command": command, "timeout": "5"})
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("took %v", took)
	}
	want := "started\n\nCommand timed out after 5s; it and the processes it started were killed."
	if text(res) != want || !res.IsError || res.Details["timedOut"] != true || res.Details["exitCode"] != int64(-1) {
		t.Fatalf("%q %v", text(res), res.Details)
	}
	waitGone(t, m)
}

// TestExecAbortKillsTree: cancelling ctx kills the tree too.
func TestExecAbortKillsTree(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	m := sleepMarker()
	ctx, cancel := context.WithCancel(context.Background())
	running := make(chan bool, 1)
	go func() {
		defer cancel()
		running <- waitMarked(m, 2)
	}()
	res, err := f.callCtx(ctx, "exec", map[string]any{"command": "sleep " + m + " & sleep " + m})
	if err != nil {
		t.Fatal(err)
	}
	if !<-running {
		t.Fatal("the command's two sleeps never ran")
	}
	if !res.IsError || res.Details["aborted"] != true || !strings.HasSuffix(text(res), "Command aborted; it and the processes it started were killed.") {
		t.Fatalf("%q %v", text(res), res.Details)
	}
	waitGone(t, m)

	// Already cancelled: nothing starts.
	_, err = f.callCtx(ctx, "exec", map[string]any{"command": "touch started"})
	wantErr(t, err, "not started")
	if _, err := os.Stat(filepath.Join(f.dir, "started")); err == nil {
		t.Fatal("a command ran after the abort")
	}
}

// TestExecBackgroundDiesAtExit: what the command leaves running in the
// background is killed when the shell exits, confined or not.
func TestExecBackgroundDiesAtExit(t *testing.T) {
	t.Parallel()
	confined, unconfined := boxes(t)
	for _, box := range []*sandbox.Sandbox{confined, unconfined} {
		if box == nil {
			continue
		}
		f := newFixtureBox(t, box)
		m := sleepMarker()
		res := f.mustCall("exec", map[string]any{"command": "sleep " + m + " & sleep " + m + " >/dev/null 2>&1 & echo done"})
		if got := text(res); got != "done\n\nCommand exited with code 0." || res.IsError {
			t.Fatalf("%v: %q", box.Platform().Confined, got)
		}
		waitGone(t, m)
	}
	// Unconfined, a setsid process leaves the group and survives; holding
	// the output, it costs only the drain grace.
	f := newFixtureBox(t, unconfined)
	m := sleepMarker()
	start := time.Now()
	res := f.mustCall("exec", map[string]any{"command": "setsid sh -c 'touch left; exec sleep " + m + "' & while [ ! -e left ]; do sleep 0.01; done; echo done"})
	defer func() {
		for _, p := range marked(m) {
			syscall.Kill(p, syscall.SIGKILL) //nolint:errcheck
		}
	}()
	if got := text(res); !strings.HasPrefix(got, "done\n") || !strings.Contains(got, "background process") || res.IsError {
		t.Fatalf("%q", got)
	}
	if took := time.Since(start); took > 60*time.Second { // the setsid sleep lasts days
		t.Fatalf("took %v", took)
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
	// The default timeout applies: far sooner than the sleep would end,
	// however busy the box.
	res = f.mustCall("exec", map[string]any{"command": "sleep 120"})
	if took := time.Since(start); took > 60*time.Second || res.Details["timedOut"] != true || !strings.Contains(text(res), "after 1s") {
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
		mu       sync.Mutex
		times    []time.Time
		texts    []string
		returned bool // Call returned
		late     int  // updates after Call returned
	)
	res, err := tool.Call(context.Background(), Call{
		Args: map[string]any{"command": "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do echo tick $i; sleep 0.03; done"},
		Update: func(p Result) {
			mu.Lock()
			defer mu.Unlock()
			if returned {
				late++
			}
			times = append(times, time.Now())
			texts = append(texts, text(p))
		},
	})
	mu.Lock()
	returned = true
	mu.Unlock()
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
	// Updates come from one goroutine that Call waits for: none can
	// come later (an update racing the return would be counted here).
	mu.Lock()
	defer mu.Unlock()
	if late != 0 {
		t.Fatalf("Update was called %d times after Call returned", late)
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

// TestExecConfined: exec runs its commands in the sandbox: the worker's
// /proc entries and what lies outside the workspace are out of reach, the
// workspace is not.
func TestExecConfined(t *testing.T) {
	t.Parallel()
	confined, _ := boxes(t)
	if confined == nil {
		mustrun.Skip(t, mustrun.Sandbox, "no confinement on this platform")
	}
	f := newFixtureBox(t, confined)
	pid := strconv.Itoa(os.Getpid())
	for _, command := range []string{
		"cat /proc/" + pid + "/environ",
		"cat /proc/" + pid + "/cmdline",
		"cat " + f.outside + "/secret.txt",
		"cat ../outside/secret.txt",
		"echo x > " + f.outside + "/planted",
		"ln -s " + f.outside + "/secret.txt s && cat s",
	} {
		res := f.mustCall("exec", map[string]any{"command": command})
		if got := text(res); !res.IsError || strings.Contains(got, secret) || strings.Contains(got, "PATH=") {
			t.Errorf("%q: %q", command, got)
		}
	}
	f.checkOutside()
	res := f.mustCall("exec", map[string]any{"command": "echo inside > in.txt && cat in.txt && ls /usr/bin/env"})
	if got := text(res); got != "inside\n/usr/bin/env\n\nCommand exited with code 0." {
		t.Fatalf("%q", got)
	}
}

// TestExecSpecSaysConfined: the model is told what the sandbox allows.
func TestExecSpecSaysConfined(t *testing.T) {
	t.Parallel()
	confined, unconfined := boxes(t)
	loose, err := Exec(Workspace{Dir: t.TempDir()}, unconfined)
	if err != nil {
		t.Fatal(err)
	}
	if d := loose.Spec().Description; strings.Contains(d, "sandbox") {
		t.Fatalf("unconfined: %q", d)
	}
	if confined == nil {
		mustrun.Skip(t, mustrun.Sandbox, "no confinement on this platform")
	}
	tight, err := Exec(Workspace{Dir: t.TempDir()}, confined)
	if err != nil {
		t.Fatal(err)
	}
	if d := tight.Spec().Description; !strings.Contains(d, "sandbox: they can write only inside the workspace") || !strings.Contains(d, "no network") {
		t.Fatalf("confined: %q", d)
	}
}

// TestExecNamedEnv: a NamedEnv variable reaches a command that names it,
// and the programs it starts, never one that does not (env lists nothing
// of it), and the tool's description says so.
func TestExecNamedEnv(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(w *Workspace) { w.NamedEnv = []string{"SKILL_TOKEN=tok-123", "OTHER_KEY=other-456"} })
	for _, tc := range []struct {
		command   string
		want, not []string
	}{
		{"env", nil, []string{"tok-123", "other-456", "SKILL_TOKEN", "OTHER_KEY"}},
		{"echo token=$SKILL_TOKEN", []string{"token=tok-123"}, []string{"other-456"}},
		{": ${SKILL_TOKEN}; env", []string{"SKILL_TOKEN=tok-123"}, []string{"other-456"}},
		{"echo $SKILL_TOKENX", nil, []string{"tok-123"}},
	} {
		out := text(f.mustCall("exec", map[string]any{"command": tc.command}))
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q: output %q lacks %q", tc.command, out, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("%q: output %q shows %q", tc.command, out, n)
			}
		}
	}
	var desc string
	for _, tl := range f.tools {
		if s := tl.Spec(); s.Name == "exec" {
			desc = s.Description
		}
	}
	if !strings.Contains(desc, "$SKILL_TOKEN, $OTHER_KEY are set only for a command that names them") || strings.Contains(desc, "tok-123") {
		t.Errorf("exec's description: %q", desc)
	}
}

// TestExecRunPhases: a started command's output is read to its end; it
// exits, or is killed by its timeout or the end of ctx, and says which.
func TestExecRunPhases(t *testing.T) {
	t.Parallel()
	_, unconfined := boxes(t)
	for _, tc := range []struct {
		name              string
		command           string
		timeout           time.Duration
		cancel            bool
		timedOut, aborted bool
		output            string
	}{
		{"exits", "echo out; echo err >&2", time.Minute, false, false, false, "out\nerr\n"},
		{"times out", "echo started; exec sleep 600", 50 * time.Millisecond, false, true, false, ""},
		{"aborted", "exec sleep 600", time.Minute, true, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tool := &execTool{w: &ws{Workspace: Workspace{Dir: t.TempDir(), Shell: "/bin/sh", MaxOutputBytes: 1000, Env: []string{"PATH=/usr/bin:/bin"}}}, box: unconfined}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			r, err := tool.start(ctx, tc.command)
			if err != nil {
				t.Fatal(err)
			}
			if tc.cancel {
				cancel()
			}
			timedOut, aborted, elapsed := r.wait(ctx, tc.timeout)
			if !r.drain() {
				t.Error("the output did not end")
			}
			text, _, _ := r.out.snapshot()
			if timedOut != tc.timedOut || aborted != tc.aborted || elapsed <= 0 || tc.output != "" && text != tc.output {
				t.Errorf("timed out %v, aborted %v, after %v, output %q", timedOut, aborted, elapsed, text)
			}
			if state := r.cmd.ProcessState(); (state.ExitCode() != 0) != (tc.timedOut || tc.aborted) {
				t.Errorf("exit code %d", state.ExitCode())
			}
		})
	}
}
