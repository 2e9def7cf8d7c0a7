package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
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
)

func TestMain(m *testing.M) {
	Main()
	tool()
	os.Exit(m.Run())
}

var (
	defaultOnce sync.Once
	defaultBox  *Sandbox
	defaultErr  error
)

// confined returns a sandbox with the default configuration, shared by the
// tests, or skips the test where the platform cannot confine.
func confined(t testing.TB) *Sandbox {
	t.Helper()
	defaultOnce.Do(func() {
		defaultBox, defaultErr = New(context.Background(), Config{})
	})
	return skipUnavailable(t, defaultBox, defaultErr)
}

func skipUnavailable(t testing.TB, box *Sandbox, err error) *Sandbox {
	t.Helper()
	if errors.Is(err, ErrUnavailable) {
		mustrun.Skip(t, mustrun.Sandbox, fmt.Sprintf("no confinement here: %v", err))
	}
	if err != nil {
		t.Fatal(err)
	}
	return box
}

func newBox(t *testing.T, cfg Config) *Sandbox {
	t.Helper()
	box, err := New(t.Context(), cfg)
	return skipUnavailable(t, box, err)
}

// eachMode runs fn as parallel subtests with cfg as is (namespaces where
// the platform has them) and with NoNamespaces (Landlock, seccomp and
// rlimits alone, and no private root hiding the host's files; as root,
// AllowRoot).
func eachMode(t *testing.T, cfg Config, fn func(t *testing.T, box *Sandbox)) {
	t.Helper()
	for _, noNS := range []bool{false, true} {
		name := "namespaces"
		if noNS {
			name = "landlock-only"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := cfg
			c.NoNamespaces = noNS
			c.AllowRoot = c.AllowRoot || noNS
			fn(t, newBox(t, c))
		})
	}
}

// env is the environment of the test commands.
var env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}

// setup is a workspace next to an "outside" directory with a secret and a
// second workspace, as the fleet lays them out.
type setup struct {
	ws, outside, other string
}

const secret = "TOP-SECRET-OUTSIDE"

func newSetup(t *testing.T) setup {
	t.Helper()
	base := t.TempDir()
	s := setup{ws: filepath.Join(base, "workspaces", "alice"), other: filepath.Join(base, "workspaces", "bob"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{s.ws, s.other, s.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(s.outside, "secret.txt"), filepath.Join(s.other, "notes.txt")} {
		if err := os.WriteFile(f, []byte(secret+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// sh runs command with sh -c in dir and returns its output and state.
func sh(t *testing.T, box *Sandbox, dir, command string) (string, *os.ProcessState) {
	t.Helper()
	var out bytes.Buffer
	cmd := box.Command(dir, env, "/bin/sh", "sh", "-c", command)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(t.Context()); err != nil {
		t.Fatalf("start %q: %v", command, err)
	}
	if err := cmd.Wait(); !exitedOnly(err) {
		t.Fatalf("wait %q: %v", command, err)
	}
	return out.String(), cmd.ProcessState()
}

func TestConfinedCommandsWork(t *testing.T) {
	t.Parallel()
	eachMode(t, Config{}, testCommandsWork)
}

func testCommandsWork(t *testing.T, box *Sandbox) {
	s := newSetup(t)
	if err := os.WriteFile(filepath.Join(s.ws, "data.txt"), []byte("b\na\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, command, want string }{
		{"echo", "echo hello", "hello\n"},
		{"pipeline", "cat data.txt | sort | tr '\\n' ' '", "a b c "},
		{"list", "ls -d data.*", "data.txt\n"},
		{"write in the workspace", "mkdir -p sub && echo made > sub/f && cat sub/f && mv sub/f g && cat g", "made\nmade\n"},
		{"exact environment", `echo "$LANG ${HOME-nohome}"`, "C nohome\n"},
		{"system files", "head -c 4 /etc/passwd; test -x /bin/sh && echo ok", "root" + "ok\n"},
		{"devices", "head -c 3 /dev/zero | wc -c; echo gone > /dev/null", "3\n"},
	}
	if box.Platform().PrivateTmp {
		tests = append(tests, struct{ name, command, want string }{"private tmp", "echo t > /tmp/f && cat /tmp/f", "t\n"})
	}
	if box.Platform().PrivateProc {
		tests = append(tests,
			struct{ name, command, want string }{"no capabilities, no new privileges", "grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status",
				"CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n"},
			// The shell expands the glob itself, so no child of it is in
			// /proc yet: a pipeline's count depends on which side started
			// first (it saw 2 of 3 under load).
			struct{ name, command, want string }{"init of its PID namespace", "echo $$; echo /proc/[0-9]*", "1\n/proc/1\n"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, st := sh(t, box, s.ws, tt.command)
			if out != tt.want || st.ExitCode() != 0 {
				t.Fatalf("%q: exit %d, output %q, want %q", tt.command, st.ExitCode(), out, tt.want)
			}
		})
	}
}

// TestConfinedCannotReach: from inside, the worker's /proc entries, files
// outside the workspace, another workspace, denied and secret system files
// are unreadable, and nothing outside the workspace is writable.
func TestConfinedCannotReach(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	// A read-only directory with a denied file in it, like a data
	// directory inside /opt.
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.MkdirAll(filepath.Join(ro, "pub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"pub/readme", "auth-profiles.json"} {
		if err := os.WriteFile(filepath.Join(ro, f), []byte(secret+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	eachMode(t, Config{ReadOnly: []string{ro}, Deny: []string{filepath.Join(ro, "auth-profiles.json")}}, func(t *testing.T, box *Sandbox) {
		testCannotReach(t, box, s, ro)
	})
}

func testCannotReach(t *testing.T, box *Sandbox, s setup, ro string) {
	pid := strconv.Itoa(os.Getpid())
	tests := []struct{ name, command string }{
		{"worker environ", "cat /proc/" + pid + "/environ"},
		{"worker cmdline", "cat /proc/" + pid + "/cmdline"},
		{"worker cwd", "ls /proc/" + pid + "/cwd/"},
		{"outside file", "cat " + s.outside + "/secret.txt"},
		{"outside by relative path", "cat ../../outside/secret.txt"},
		{"other workspace", "cat " + s.other + "/notes.txt"},
		{"other workspace listing", "ls " + s.other},
		{"denied file in a read-only directory", "cat " + ro + "/auth-profiles.json"},
		{"shadow", "cat /etc/shadow"},
		{"write outside", "echo " + secret + " > " + s.outside + "/planted"},
		{"write into other workspace", "echo " + secret + " > " + s.other + "/AGENTS.md"},
		{"write into a read-only directory", "echo " + secret + " > " + ro + "/pub/readme"},
		{"symlink out", "ln -s " + s.outside + "/secret.txt link && cat link"},
		{"hard link out", "ln " + s.outside + "/secret.txt hard && cat hard"},
		{"root listing", "ls /"},
		{"home", "ls /root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, st := sh(t, box, s.ws, tt.command)
			if st.ExitCode() == 0 || strings.Contains(out, secret) || strings.Contains(out, "PATH=") {
				t.Fatalf("%q: exit %d, output %q", tt.command, st.ExitCode(), out)
			}
		})
	}
	// The read-only directory's other files stay readable.
	if out, st := sh(t, box, s.ws, "cat "+ro+"/pub/readme"); st.ExitCode() != 0 || out != secret+"\n" {
		t.Fatalf("granted file: exit %d, %q", st.ExitCode(), out)
	}
	t.Run("nothing changed outside", func(t *testing.T) {
		for _, p := range []string{filepath.Join(s.outside, "planted"), filepath.Join(s.other, "AGENTS.md")} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: %v", p, err)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(ro, "pub/readme")); string(b) != secret+"\n" {
			t.Errorf("read-only file changed: %q", b)
		}
	})
}

// TestPrivateTmp: the command's /tmp is its own.
func TestPrivateTmp(t *testing.T) {
	t.Parallel()
	box := confined(t)
	if !box.Platform().PrivateTmp {
		t.Skip("no private /tmp here: " + box.Platform().String())
	}
	s := newSetup(t)
	name := fmt.Sprintf("lanefleet-sandbox-%d", rand.Int64())
	if out, st := sh(t, box, s.ws, "echo x > /tmp/"+name+" && ls /tmp"); st.ExitCode() != 0 || !strings.Contains(out, name+"\n") {
		t.Fatalf("exit %d, %q", st.ExitCode(), out)
	}
	if _, err := os.Stat("/tmp/" + name); !errors.Is(err, os.ErrNotExist) {
		os.Remove("/tmp/" + name)
		t.Fatalf("the command wrote the host's /tmp: %v", err)
	}
}

// marked returns the host pids of processes whose command line has marker
// as a word (an argument, or a word of a shell's script): a substring also
// matched other processes' arguments (go-build1502445333 directories of
// compiles running beside the test), as tools' marked found.
func marked(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && hasWord(b, marker) && !zombie(pid) {
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

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// waitGone waits until no process carries marker.
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
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStarted waits until n processes carry marker.
func waitStarted(t *testing.T, marker string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(marked(marker)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d processes started", len(marked(marker)), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sleepMarker is a sleep duration no other process uses, so the test can
// find its sleeps in the host's /proc.
func sleepMarker() string { return fmt.Sprintf("%d", 100000+rand.IntN(800000)) }

// TestTreeKilled: a setsid grandchild and a background sleep die when the
// command is killed, and when it exits by itself.
func TestTreeKilled(t *testing.T) {
	t.Parallel()
	box := confined(t)
	if !box.Platform().Namespaces {
		t.Skip("without a PID namespace a setsid process leaves the group: " + box.Platform().NoNamespaces)
	}
	s := newSetup(t)
	t.Run("kill", func(t *testing.T) {
		t.Parallel()
		m := sleepMarker()
		cmd := box.Command(s.ws, env, "/bin/sh", "sh", "-c", "setsid sleep "+m+" & sleep "+m+" & sleep "+m)
		if err := cmd.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		waitStarted(t, m, 3)
		cmd.Kill()
		if err := cmd.Wait(); err == nil {
			t.Fatal("killed command exited 0")
		}
		waitGone(t, m)
	})
	t.Run("exit", func(t *testing.T) {
		t.Parallel()
		m := sleepMarker()
		out, st := sh(t, box, s.ws, "setsid sleep "+m+" & sleep "+m+" >/dev/null 2>&1 & echo started")
		if out != "started\n" || st.ExitCode() != 0 {
			t.Fatalf("exit %d, %q", st.ExitCode(), out)
		}
		waitGone(t, m)
	})
}

// TestLimits: a fork bomb, a huge file, a memory hog and a CPU hog are
// bounded.
func TestLimits(t *testing.T) {
	t.Parallel()
	box := newBox(t, Config{Limits: Limits{Processes: 32, FileSize: 1 << 20, Memory: 128 << 20, CPUTime: time.Second}})
	p := box.Platform()
	s := newSetup(t)
	t.Run("processes", func(t *testing.T) {
		t.Parallel()
		if !p.NPROC && !p.PIDMax && p.Cgroup == "" {
			t.Skip("processes are unbounded here: " + p.String())
		}
		bound := 32
		if !p.NPROC && p.Cgroup == "" {
			bound = pidMax(32)
		}
		// Sleeps until a fork fails, which ends dash (and so the
		// PID namespace).
		m := sleepMarker()
		out, st := sh(t, box, s.ws, "while :; do sleep "+m+" & echo $! >> pids; done")
		b, _ := os.ReadFile(filepath.Join(s.ws, "pids"))
		n := strings.Count(string(b), "\n")
		if !strings.Contains(out, "fork") || n > bound || n < bound/2 || st.ExitCode() == 0 {
			t.Fatalf("%d sleeps started, bound %d; exit %d, output %q", n, bound, st.ExitCode(), out)
		}
		if p.Namespaces {
			waitGone(t, m)
		}
	})
	t.Run("file size", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(s.ws, "fsize")
		os.Mkdir(dir, 0o755) //nolint:errcheck
		_, st := sh(t, box, dir, "head -c 5000000 /dev/zero > big")
		fi, err := os.Stat(filepath.Join(dir, "big"))
		if err != nil || fi.Size() > 1<<20 || st.ExitCode() == 0 {
			t.Fatalf("exit %d, %v %v", st.ExitCode(), fi, err)
		}
	})
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		// awk doubles a string until it cannot.
		out, st := sh(t, box, s.ws, `awk 'BEGIN { s = "x"; for (i = 0; i < 40; i++) s = s s; print length(s) }'`)
		if st.ExitCode() == 0 || strings.Contains(out, "1099511627776") {
			t.Fatalf("exit %d, %q", st.ExitCode(), out)
		}
	})
	t.Run("cpu", func(t *testing.T) {
		t.Parallel()
		_, st := sh(t, box, s.ws, "while :; do :; done")
		if ws, ok := st.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("state %v", st)
		}
	})
}

// TestNoNetwork: a command cannot reach a server on the host's loopback
// unless Network is set.
func TestNoNetwork(t *testing.T) {
	t.Parallel()
	eachMode(t, Config{}, testNoNetwork)
}

func testNoNetwork(t *testing.T, box *Sandbox) {
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("needs bash for /dev/tcp")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(secret + "\n")) //nolint:errcheck
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	s := newSetup(t)
	out, st := sh(t, box, s.ws, "exec /bin/bash -c 'cat < /dev/tcp/127.0.0.1/"+port+"'")
	if st.ExitCode() == 0 || strings.Contains(out, secret) {
		t.Fatalf("reached the host: exit %d, %q", st.ExitCode(), out)
	}
	// Network: true keeps the host's network.
	box2 := newBox(t, Config{Network: true, NoNamespaces: !box.Platform().Namespaces, AllowRoot: !box.Platform().Namespaces})
	if out, st := sh(t, box2, s.ws, "exec /bin/bash -c 'cat < /dev/tcp/127.0.0.1/"+port+"'"); st.ExitCode() != 0 || out != secret+"\n" {
		t.Fatalf("Network: true: exit %d, %q", st.ExitCode(), out)
	}
}

// TestNestedHelperCannotWiden: a command that reaches the binary and starts
// it as a helper itself, with instructions granting everything, stays
// confined: Landlock domains only narrow (and without /proc, libpsx aborts
// the helper before it can try).
func TestNestedHelperCannotWiden(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("needs bash for exec -a")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	eachMode(t, Config{ReadOnly: []string{filepath.Dir(self)}}, func(t *testing.T, box *Sandbox) {
		s := newSetup(t)
		b, err := json.Marshal(spec{Path: "/bin/cat", Argv: []string{"cat", s.outside + "/secret.txt", "/etc/shadow"},
			Grants: []grant{{Path: "/", Dir: true, Write: true}}, Limits: box.cfg.Limits})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.ws, "spec.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := sh(t, box, s.ws, helperEnv+"="+helperValue+" /bin/bash -c 'exec -a "+helperArg0+" "+self+" 3<spec.json 4>report'; echo exit $?; cat report")
		if strings.Contains(out, secret) || strings.Contains(out, "root:") || strings.Contains(out, "exit 0") {
			t.Fatalf("%q", out)
		}
		t.Log(out)
	})
}

// TestHelperFailure: a command that cannot start is a start error saying
// why; nothing runs.
func TestHelperFailure(t *testing.T) {
	t.Parallel()
	box := confined(t)
	s := newSetup(t)
	cmd := box.Command(s.ws, env, "/nonexistent/sh", "sh", "-c", "true")
	err := cmd.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/sh") {
		t.Fatalf("err %v", err)
	}
	// A relative directory.
	if err := box.Command("ws", env, "/bin/sh", "sh", "-c", "true").Start(t.Context()); err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Fatalf("relative directory: %v", err)
	}
	// A workspace that does not exist.
	cmd = box.Command(filepath.Join(s.ws, "missing"), env, "/bin/sh", "sh", "-c", "true")
	if err := cmd.Start(t.Context()); err == nil {
		cmd.Wait() //nolint:errcheck
		t.Fatal("started in a missing directory")
	}
}

func TestUnconfined(t *testing.T) {
	t.Parallel()
	box, err := New(t.Context(), Config{Unconfined: true})
	if err != nil {
		t.Fatal(err)
	}
	if p := box.Platform(); p.Confined || !strings.Contains(p.String(), "UNCONFINED") {
		t.Fatalf("%+v", p)
	}
	s := newSetup(t)
	// Unconfined reaches outside: the operator's choice.
	if out, _ := sh(t, box, s.ws, "cat "+s.outside+"/secret.txt"); out != secret+"\n" {
		t.Fatalf("%q", out)
	}
	// A background process in the group dies when the command ends.
	m := sleepMarker()
	if out, _ := sh(t, box, s.ws, "sleep "+m+" >/dev/null 2>&1 & echo started"); out != "started\n" {
		t.Fatalf("%q", out)
	}
	waitGone(t, m)
}

func TestPlatformString(t *testing.T) {
	t.Parallel()
	box := confined(t)
	p := box.Platform()
	t.Log(p.String())
	if !strings.Contains(p.String(), fmt.Sprintf("landlock ABI %d", p.LandlockABI)) || !p.Confined {
		t.Fatal(p.String())
	}
}

// BenchmarkCommand: the cost of one call of `true`, unconfined (the
// baseline), with Landlock and rlimits only, and with namespaces too; report
// the ratios to the baseline.
func BenchmarkCommand(b *testing.B) {
	dir := b.TempDir()
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"unconfined", Config{Unconfined: true}}, {"landlock", Config{NoNamespaces: true, AllowRoot: true}}, {"namespaces", Config{}}} {
		box, err := New(b.Context(), c.cfg)
		if errors.Is(err, ErrUnavailable) {
			b.Logf("%s: %v", c.name, err)
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				cmd := box.Command(dir, env, "/bin/true", "true")
				if err := cmd.Start(b.Context()); err != nil {
					b.Fatal(err)
				}
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
