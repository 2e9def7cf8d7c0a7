package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// The helper is the worker's own binary, started as /proc/self/exe with
// argv[0] helperArg0 and helperEnv as its only environment variable. Its
// instructions (a spec) come on fd 3, a memfd the parent wrote; it reports
// what failed on fd 4, a pipe the parent reads until it closes at the
// helper's execve. "-test.run=^$" makes a test binary that lacks the hook
// run no test (and any other binary fail on the unknown flag) instead of
// starting itself again.
const (
	helperArg0  = "lanefleet-sandbox"
	helperEnv   = "LANEFLEET_SANDBOX_HELPER"
	helperValue = "1"
	specFD      = 3
	reportFD    = 4
	maxSpec     = 16 << 20
	maxReport   = 64 << 10
)

// devices are granted to every confined command.
var devices = []grant{
	{Path: "/dev/null", Write: true},
	{Path: "/dev/zero"},
	{Path: "/dev/full", Write: true},
	{Path: "/dev/random"},
	{Path: "/dev/urandom"},
}

// spec is what the helper does before it runs the command.
type spec struct {
	Path   string   `json:"path"`
	Argv   []string `json:"argv"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir,omitempty"`
	Grants []grant  `json:"grants"`
	Limits Limits   `json:"limits"`
	// In new namespaces: make every mount private, mount a fresh /proc
	// and a tmpfs /tmp, set the PID namespace's pid_max, bring up the
	// loopback interface of a new network namespace.
	Namespaces bool  `json:"namespaces,omitempty"`
	MountProc  bool  `json:"mountProc,omitempty"`
	MountTmp   bool  `json:"mountTmp,omitempty"`
	TmpSize    int64 `json:"tmpSize,omitempty"`
	PIDMax     int   `json:"pidMax,omitempty"`
	Loopback   bool  `json:"loopback,omitempty"`
	// RestrictNet has Landlock forbid TCP connect and bind.
	RestrictNet bool `json:"restrictNet,omitempty"`
	// Probe: do every step that works, report on fd 4 and exit.
	Probe bool `json:"probe,omitempty"`
}

// report is the helper's answer to a probe.
type report struct {
	Proc, Tmp, PIDMax, Loopback bool
	// Landlocked: after the restriction, "/" could not be opened.
	Landlocked bool
	Problems   []string
}

// Main runs the sandbox helper when this process was started as one, and
// returns at once otherwise. Call it first thing in main, and in TestMain of
// every test binary that confines commands: the helper is the binary
// itself, started again.
//
// Only the worker starts helpers: argv[0], a dedicated environment
// variable and the files on fd 3 and 4 all come from the parent, never from
// a message. A confined command that starts the binary as a helper itself
// only confines itself further: Landlock domains stack, hard limits cannot
// be raised, namespaces nest.
func Main() {
	if len(os.Args) == 0 || os.Args[0] != helperArg0 || os.Getenv(helperEnv) != helperValue {
		return
	}
	// Capabilities are dropped and execve is called on this thread.
	runtime.LockOSThread()
	syscall.CloseOnExec(reportFD)
	out := os.NewFile(reportFD, "sandbox-report")
	rep, err := helper()
	if err != nil {
		fmt.Fprint(out, err.Error())
		os.Exit(126)
	}
	if err := json.NewEncoder(out).Encode(rep); err != nil {
		os.Exit(126)
	}
	os.Exit(0)
}

// helper prepares the confinement and execs the command; it returns only
// with an error or after a probe.
func helper() (*report, error) {
	f := os.NewFile(specFD, "sandbox-spec")
	if f == nil {
		return nil, errors.New("sandbox helper: no spec on fd 3")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSpec+1))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("sandbox helper: read spec: %w", err)
	}
	if len(b) > maxSpec {
		return nil, errors.New("sandbox helper: spec too large")
	}
	var sp spec
	if err := json.Unmarshal(b, &sp); err != nil {
		return nil, fmt.Errorf("sandbox helper: spec: %w", err)
	}
	rep := &report{}
	// step runs one part of the setup: a failure ends the helper, or, in a
	// probe, is noted.
	step := func(what string, ok *bool, fn func() error) error {
		err := fn()
		if err == nil {
			if ok != nil {
				*ok = true
			}
			return nil
		}
		err = fmt.Errorf("%s: %w", what, err)
		if sp.Probe {
			rep.Problems = append(rep.Problems, err.Error())
			return nil
		}
		return err
	}
	grants := sp.Grants
	if sp.Namespaces {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return nil, fmt.Errorf("make mounts private: %w", err) // fatal even in a probe: no namespaces
		}
		if sp.MountProc {
			err := step("mount /proc", &rep.Proc, func() error {
				return unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
			})
			if err != nil {
				return nil, err
			}
			if rep.Proc {
				grants = append(grants, grant{Path: "/proc", Dir: true})
			}
		}
		if sp.PIDMax > 0 && rep.Proc {
			err := step("set pid_max", &rep.PIDMax, func() error {
				return os.WriteFile("/proc/sys/kernel/pid_max", []byte(strconv.Itoa(sp.PIDMax)), 0)
			})
			if err != nil {
				return nil, err
			}
		}
		if sp.MountTmp {
			if err := step("mount /tmp", &rep.Tmp, func() error { return privateTmp(grants, sp.TmpSize) }); err != nil {
				return nil, err
			}
			if rep.Tmp {
				grants = append(grants, grant{Path: "/tmp", Dir: true, Write: true})
			}
		}
		if sp.Dir != "" {
			// The workspace as it is seen now, in case /tmp covered it.
			if err := unix.Chdir(sp.Dir); err != nil {
				return nil, fmt.Errorf("chdir: %w", err)
			}
		}
		if sp.Loopback {
			if err := step("bring up lo", &rep.Loopback, loopbackUp); err != nil {
				return nil, err
			}
		}
	}
	if err := restrict(grants, sp.RestrictNet); err != nil {
		return nil, err
	}
	if sp.Probe {
		fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		rep.Landlocked = errors.Is(err, unix.EACCES)
	}
	if err := step("drop capabilities", nil, dropCapabilities); err != nil {
		return nil, err
	}
	// Prepared before the limits: nothing below allocates much.
	argv0, err := syscall.BytePtrFromString(sp.Path)
	if err != nil {
		return nil, fmt.Errorf("command path: %w", err)
	}
	argv, err := syscall.SlicePtrFromStrings(sp.Argv)
	if err != nil {
		return nil, fmt.Errorf("command arguments: %w", err)
	}
	envv, err := syscall.SlicePtrFromStrings(sp.Env)
	if err != nil {
		return nil, fmt.Errorf("command environment: %w", err)
	}
	if err := step("set limits", nil, func() error { return setLimits(sp.Limits) }); err != nil {
		return nil, err
	}
	if sp.Probe {
		return rep, nil
	}
	_, _, errno := syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envv)
	return nil, &os.PathError{Op: "exec", Path: sp.Path, Err: errno}
}

// restrict applies Landlock: the grants, and TCP connect and bind
// forbidden when restrictNet; signals and abstract UNIX sockets are scoped
// to the command (ABI 6+). It fails without Landlock: best effort only
// downgrades to the kernel's ABI.
func restrict(grants []grant, restrictNet bool) error {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return fmt.Errorf("landlock is not available: %v", err)
	}
	var ro, rofiles, rw, rwfiles []string
	for _, g := range grants {
		switch {
		case g.Dir && g.Write:
			rw = append(rw, g.Path)
		case g.Dir:
			ro = append(ro, g.Path)
		case g.Write:
			rwfiles = append(rwfiles, g.Path)
		default:
			rofiles = append(rofiles, g.Path)
		}
	}
	rwRule := landlock.RWDirs(rw...)
	if abi >= 2 {
		// Renames and links between directories of the workspace; asked
		// of an ABI 1 kernel, best effort would drop Landlock entirely.
		rwRule = rwRule.WithRefer()
	}
	cfg := landlock.V11.BestEffort()
	if !restrictNet {
		cfg.HandledAccessNet = 0
	}
	err = cfg.Restrict(
		landlock.RODirs(ro...).IgnoreIfMissing(),
		landlock.ROFiles(rofiles...).IgnoreIfMissing(),
		landlock.RWFiles(rwfiles...).IgnoreIfMissing(),
		rwRule,
	)
	if err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}

// privateTmp mounts a tmpfs of size bytes on /tmp. The granted paths below
// /tmp (a workspace in the system's temporary directory) are cloned before
// and mounted back at the same place in it, the read-only ones as
// read-only mounts.
func privateTmp(grants []grant, size int64) error {
	type kept struct {
		g  grant
		fd int
	}
	var keep []kept
	defer func() {
		for _, k := range keep {
			unix.Close(k.fd)
		}
	}()
	for _, g := range grants {
		if g.Path == "/tmp" || !strings.HasPrefix(g.Path, "/tmp/") {
			if strings.HasPrefix("/tmp/", strings.TrimSuffix(g.Path, "/")+"/") {
				return fmt.Errorf("%s is granted: /tmp stays shared", g.Path)
			}
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, g.Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("clone %s: %w", g.Path, err)
		}
		keep = append(keep, kept{g, fd})
		if !g.Write {
			// Below /tmp, Landlock would let the tmpfs's write access
			// reach into the clone: make the clone itself read-only.
			attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
			if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
				return fmt.Errorf("clone %s read-only: %w", g.Path, err)
			}
		}
	}
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=1777", size)); err != nil {
		return err
	}
	for _, k := range keep {
		dir := k.g.Path
		if !k.g.Dir {
			dir = filepath.Dir(dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if !k.g.Dir {
			f, err := os.OpenFile(k.g.Path, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			f.Close()
		}
		if err := unix.MoveMount(k.fd, "", unix.AT_FDCWD, k.g.Path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount %s back: %w", k.g.Path, err)
		}
	}
	return nil
}

// dropCapabilities empties this thread's capability sets, which execve
// keeps empty: Landlock set no_new_privs, so even root gains none.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return unix.Capset(&hdr, &data[0])
}

// setLimits sets each limit as soft and hard limit, never above the hard
// limit the helper got.
func setLimits(l Limits) error {
	cpu := uint64(math.Ceil(l.CPUTime.Seconds()))
	for _, r := range []struct {
		name string
		res  int
		v    uint64
	}{
		{"core", unix.RLIMIT_CORE, 0},
		{"open files", unix.RLIMIT_NOFILE, uint64(l.OpenFiles)},
		{"file size", unix.RLIMIT_FSIZE, uint64(l.FileSize)},
		{"cpu", unix.RLIMIT_CPU, cpu},
		{"processes", unix.RLIMIT_NPROC, uint64(l.Processes)},
		{"memory", unix.RLIMIT_AS, uint64(l.Memory)}, // last: the helper allocates no more
	} {
		var cur unix.Rlimit
		if err := unix.Prlimit(0, r.res, nil, &cur); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		v := min(r.v, cur.Max)
		if err := unix.Prlimit(0, r.res, &unix.Rlimit{Cur: v, Max: v}, nil); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
	}
	return nil
}

// loopbackUp brings up lo in a new network namespace, so a command can
// serve and reach itself on 127.0.0.1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// probe finds out what confinement works here by running the helper: first
// in new namespaces, then, if they are refused, without.
func probe(ctx context.Context, s *Sandbox) (Platform, error) {
	p := Platform{Confined: true, Network: s.cfg.Network, Limits: s.cfg.Limits, NPROC: os.Geteuid() != 0}
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return p, fmt.Errorf("%w: the kernel has no Landlock (Linux 5.13+ with landlock in the lsm= boot parameter; landlock_create_ruleset: %v)", ErrUnavailable, err)
	}
	p.LandlockABI = abi
	sp := &spec{
		Path: "/bin/true", Argv: []string{"true"}, Grants: append(append([]grant(nil), s.grants...), devices...),
		Limits: s.cfg.Limits, Namespaces: true, MountProc: true, MountTmp: true, TmpSize: s.cfg.TmpSize,
		PIDMax: pidMax(s.cfg.Limits.Processes), Loopback: !s.cfg.Network, Probe: true,
	}
	var rep *report
	nsErr := errors.New("Config.NoNamespaces")
	if !s.cfg.NoNamespaces {
		rep, nsErr = runProbe(ctx, sp, s.cfg.Network)
	}
	if nsErr == nil {
		p.Namespaces, p.PrivateProc, p.PrivateTmp, p.PIDMax = true, rep.Proc, rep.Tmp, rep.PIDMax
	} else {
		if ctx.Err() != nil {
			return p, fmt.Errorf("sandbox: probe: %w", ctx.Err())
		}
		p.NoNamespaces = nsErr.Error()
		*sp = spec{Path: sp.Path, Argv: sp.Argv, Grants: sp.Grants, Limits: sp.Limits, RestrictNet: !s.cfg.Network, Probe: true}
		if rep, err = runProbe(ctx, sp, true); err != nil {
			return p, err
		}
	}
	p.Missing = rep.Problems
	if !rep.Landlocked {
		return p, fmt.Errorf("%w: Landlock (ABI %d) did not confine the probe: %s", ErrUnavailable, abi, strings.Join(rep.Problems, "; "))
	}
	return p, nil
}

// runProbe runs the helper in probe mode.
func runProbe(ctx context.Context, sp *spec, network bool) (*report, error) {
	cmd, out, err := startHelper(ctx, sp, "/", nil, nil, network)
	if err != nil {
		return nil, err
	}
	werr := cmd.Wait()
	var rep report
	if werr != nil || json.Unmarshal(out, &rep) != nil {
		if len(out) == 0 {
			return nil, fmt.Errorf("sandbox: the helper did not answer (%v): call sandbox.Main() first in main, and in TestMain of tests", werr)
		}
		return nil, fmt.Errorf("sandbox: %s", strings.TrimSpace(string(out)))
	}
	return &rep, nil
}

// startHelper starts the helper with sp and returns what it wrote on fd 4
// before it exec'd the command (or exited). ctx bounds the start only.
func startHelper(ctx context.Context, sp *spec, dir string, stdout, stderr io.Writer, network bool) (*exec.Cmd, []byte, error) {
	b, err := json.Marshal(sp)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	fd, err := unix.MemfdCreate("lanefleet-sandbox-spec", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: memfd: %w", err)
	}
	specFile := os.NewFile(uintptr(fd), "sandbox-spec")
	defer specFile.Close()
	if _, err := specFile.Write(b); err != nil {
		return nil, nil, fmt.Errorf("sandbox: write spec: %w", err)
	}
	if _, err := specFile.Seek(0, io.SeekStart); err != nil {
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	defer repR.Close()
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if sp.Namespaces {
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC
		if !network {
			attr.Cloneflags |= syscall.CLONE_NEWNET
		}
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{helperArg0, "-test.run=^$"},
		Env: []string{helperEnv + "=" + helperValue}, Dir: dir,
		Stdout: stdout, Stderr: stderr, ExtraFiles: []*os.File{specFile, repW}, SysProcAttr: attr,
	}
	err = cmd.Start()
	repW.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: start the helper: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() }) //nolint:errcheck // it may have exited
	out, _ := io.ReadAll(io.LimitReader(repR, maxReport))
	stop()
	return cmd, out, nil
}

func (c *Cmd) startConfined(ctx context.Context) error {
	if !filepath.IsAbs(c.dir) {
		return fmt.Errorf("sandbox: directory %q is not absolute", c.dir)
	}
	p := c.box.platform
	grants := append(append(append([]grant(nil), c.box.grants...), devices...), grant{Path: c.dir, Dir: true, Write: true})
	sp := &spec{Path: c.path, Argv: c.argv, Env: c.env, Dir: c.dir, Grants: grants, Limits: c.box.cfg.Limits}
	if p.Namespaces {
		sp.Namespaces, sp.MountProc, sp.MountTmp, sp.TmpSize, sp.Loopback = true, p.PrivateProc, p.PrivateTmp, c.box.cfg.TmpSize, !p.Network
		if p.PIDMax {
			sp.PIDMax = pidMax(p.Limits.Processes)
		}
	} else {
		sp.RestrictNet = !p.Network
	}
	cmd, out, err := startHelper(ctx, sp, c.dir, c.Stdout, c.Stderr, p.Network)
	if err != nil {
		return err
	}
	if len(out) > 0 || ctx.Err() != nil {
		cmd.Process.Kill() //nolint:errcheck // it may have exited
		cmd.Wait()         //nolint:errcheck // the helper failed; its message says why
		if len(out) == 0 {
			return fmt.Errorf("sandbox: %w", ctx.Err())
		}
		return fmt.Errorf("sandbox: %s", strings.TrimSpace(string(out)))
	}
	c.cmd, c.tree = cmd, p.Namespaces
	return nil
}
