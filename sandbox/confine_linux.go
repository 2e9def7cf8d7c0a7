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
	"slices"
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
// instructions (a spec) come on fd 3, a pipe the parent writes once the
// helper is in its cgroup; it reports what failed on fd 4, a pipe the
// parent reads until it closes at the helper's execve. fd 5, when the
// worker runs as root, is the workspace as an idmapped mount.
// "-test.run=^$" makes a test binary that lacks the hook run no test (and
// any other binary fail on the unknown flag) instead of starting itself
// again.
const (
	helperArg0  = "lanefleet-sandbox"
	helperEnv   = "LANEFLEET_SANDBOX_HELPER"
	helperValue = "1"
	specFD      = 3
	reportFD    = 4
	workspaceFD = 5
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
	// MemoryRlimit: Limits.Memory is each process's address space
	// (RLIMIT_AS), there being no cgroup to bound the whole command.
	MemoryRlimit bool `json:"memoryRlimit,omitempty"`
	// In new namespaces: make every mount private, build a root of the
	// Binds and Links,
	// mount a fresh /proc and a tmpfs /tmp in it, set the PID namespace's
	// pid_max, bring up the loopback interface of a new network
	// namespace.
	Namespaces bool    `json:"namespaces,omitempty"`
	Binds      []grant `json:"binds,omitempty"`
	Links      []link  `json:"links,omitempty"`
	// IDMapped is the bind (the workspace) that comes from fd 5.
	IDMapped  string `json:"idmapped,omitempty"`
	MountProc bool   `json:"mountProc,omitempty"`
	MountTmp  bool   `json:"mountTmp,omitempty"`
	TmpSize   int64  `json:"tmpSize,omitempty"`
	PIDMax    int    `json:"pidMax,omitempty"`
	Loopback  bool   `json:"loopback,omitempty"`
	// RestrictNet has Landlock forbid TCP connect and bind.
	RestrictNet bool `json:"restrictNet,omitempty"`
	// SetIDs: the namespace maps its uid and gid 0 to the host's root
	// (the helper reads the worker's files to build the root) and 1 to
	// the host's HostID: once Landlock holds, the helper becomes 1 and
	// drops root's supplementary groups, losing every capability.
	SetIDs bool `json:"setIDs,omitempty"`
	// Seccomp installs the filter of seccomp_linux.go, last.
	Seccomp bool `json:"seccomp,omitempty"`
	// Probe: do every step that works, report on fd 4 and exit.
	Probe bool `json:"probe,omitempty"`
}

// report is the helper's answer to a probe.
type report struct {
	Proc, Tmp, PIDMax, Loopback bool
	// Landlocked: after the restriction, "/" could not be opened.
	Landlocked bool
	// Seccomp: after the filter, an AF_UNIX socket could not be made.
	Seccomp  bool
	Problems []string
}

// Main runs the sandbox helper when this process was started as one, and
// returns at once otherwise. Call it first thing in main, and in TestMain of
// every test binary that confines commands: the helper is the binary
// itself, started again.
//
// Only the worker starts helpers: argv[0], a dedicated environment
// variable and the files on fd 3 and 4 all come from the parent, never from
// a message. A confined command that starts the binary as a helper itself
// only confines itself further: Landlock domains and seccomp filters
// stack, hard limits cannot be raised, namespaces nest.
func Main() {
	if len(os.Args) == 0 || os.Args[0] != helperArg0 || os.Getenv(helperEnv) != helperValue {
		return
	}
	// Capabilities are dropped, seccomp installed and execve called on
	// this thread.
	runtime.LockOSThread()
	syscall.CloseOnExec(reportFD)
	syscall.CloseOnExec(workspaceFD)
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
	sp, err := readSpec()
	if err != nil {
		return nil, err
	}
	rep := &report{}
	step := stepper(sp.Probe, rep)
	grants := sp.Grants
	if sp.Namespaces {
		if grants, err = enterNamespaces(&sp, rep, step, grants); err != nil {
			return nil, err
		}
	}
	if err := restrict(grants, sp.RestrictNet); err != nil {
		return nil, err
	}
	if sp.SetIDs {
		err := step("become uid 1", nil, becomeUID1)
		if err != nil {
			return nil, err
		}
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
	var filter []unix.SockFilter
	if sp.Seccomp {
		err := step("seccomp", nil, func() error {
			var err error
			filter, err = seccompProgram()
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if err := step("set limits", nil, func() error { return setLimits(sp.Limits, sp.MemoryRlimit) }); err != nil {
		return nil, err
	}
	// Last: from here on the helper itself may not make a UNIX socket.
	if filter != nil {
		err := step("seccomp", &rep.Seccomp, func() error { return installSeccompChecked(filter, sp.Probe) })
		if err != nil {
			return nil, err
		}
	}
	if sp.Probe {
		return rep, nil
	}
	_, _, errno := syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envv)
	return nil, &os.PathError{Op: "exec", Path: sp.Path, Err: errno}
}

// readSpec reads the helper's spec from fd 3.
func readSpec() (spec, error) {
	f := os.NewFile(specFD, "sandbox-spec")
	if f == nil {
		return spec{}, errors.New("sandbox helper: no spec on fd 3")
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSpec+1))
	f.Close()
	if err != nil {
		return spec{}, fmt.Errorf("sandbox helper: read spec: %w", err)
	}
	if len(b) > maxSpec {
		return spec{}, errors.New("sandbox helper: spec too large")
	}
	var sp spec
	if err := json.Unmarshal(b, &sp); err != nil {
		return spec{}, fmt.Errorf("sandbox helper: spec: %w", err)
	}
	return sp, nil
}

// stepper returns the step that runs one part of the setup: a failure
// ends the helper, or, in a probe, is noted in rep.
func stepper(probe bool, rep *report) func(what string, ok *bool, fn func() error) error {
	return func(what string, ok *bool, fn func() error) error {
		err := fn()
		if err == nil {
			if ok != nil {
				*ok = true
			}
			return nil
		}
		err = fmt.Errorf("%s: %w", what, err)
		if probe {
			rep.Problems = append(rep.Problems, err.Error())
			return nil
		}
		return err
	}
}

// enterNamespaces sets up the command's namespaces: private mounts and
// root, pid_max, the working directory and the loopback interface. It
// returns the grants with /proc and /tmp when the private root has them.
func enterNamespaces(sp *spec, rep *report, step func(string, *bool, func() error) error, grants []grant) ([]grant, error) {
	// Failures here are fatal even in a probe: no namespaces then.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return grants, fmt.Errorf("make mounts private: %w", err)
	}
	if err := privateRoot(sp, rep, step); err != nil {
		return grants, fmt.Errorf("private root: %w", err)
	}
	if rep.Proc {
		grants = append(grants, grant{Path: "/proc", Dir: true})
	}
	if sp.PIDMax > 0 && rep.Proc {
		err := step("set pid_max", &rep.PIDMax, func() error {
			return os.WriteFile("/proc/sys/kernel/pid_max", []byte(strconv.Itoa(sp.PIDMax)), 0)
		})
		if err != nil {
			return grants, err
		}
	}
	if rep.Tmp {
		grants = append(grants, grant{Path: "/tmp", Dir: true, Write: true})
	}
	if sp.Dir != "" {
		if err := unix.Chdir(sp.Dir); err != nil {
			return grants, fmt.Errorf("chdir: %w", err)
		}
	}
	if sp.Loopback {
		if err := step("bring up lo", &rep.Loopback, loopbackUp); err != nil {
			return grants, err
		}
	}
	return grants, nil
}

// becomeUID1 makes the helper uid and gid 1 with no supplementary groups,
// keeping its parent-death signal. syscall's calls, not unix's: they
// change every thread of the helper.
func becomeUID1() error {
	// Output pipes are the worker's (0600): opened again as
	// /dev/stdout or /dev/stderr (/proc/self/fd/1, 2), they must
	// be open to HostID too.
	for fd := 1; fd <= 2; fd++ {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			if err := unix.Fchmod(fd, 0o666); err != nil {
				return fmt.Errorf("output pipe: %w", err)
			}
		}
	}
	if err := syscall.Setgroups(nil); err != nil {
		return err
	}
	if err := syscall.Setresgid(1, 1, 1); err != nil {
		return err
	}
	if err := syscall.Setresuid(1, 1, 1); err != nil {
		return err
	}
	// A change of uid clears the parent-death signal: the
	// command must still die with the worker.
	return unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
}

// installSeccompChecked installs the filter; in a probe it checks that the
// filter refuses an AF_UNIX socket with EACCES.
func installSeccompChecked(filter []unix.SockFilter, probe bool) error {
	if err := installSeccomp(filter); err != nil {
		return err
	}
	if !probe {
		return nil
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return errors.New("the filter let an AF_UNIX socket be made")
	}
	if !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("an AF_UNIX socket failed with %w, not EACCES", err)
	}
	return nil
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
// limit the helper got; the memory limit as address space only when
// memoryRlimit (no cgroup bounds the command's memory).
func setLimits(l Limits, memoryRlimit bool) error {
	cpu := uint64(math.Ceil(l.CPUTime.Seconds()))
	type rlimit struct {
		name string
		res  int
		v    uint64
	}
	limits := []rlimit{
		{"core", unix.RLIMIT_CORE, 0},
		{"open files", unix.RLIMIT_NOFILE, uint64(l.OpenFiles)},
		{"file size", unix.RLIMIT_FSIZE, uint64(l.FileSize)},
		{"cpu", unix.RLIMIT_CPU, cpu},
		{"processes", unix.RLIMIT_NPROC, uint64(l.Processes)},
	}
	if memoryRlimit {
		limits = append(limits, rlimit{"memory", unix.RLIMIT_AS, uint64(l.Memory)}) // last: the helper allocates no more
	}
	for _, r := range limits {
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
// in new namespaces, then, if they are refused, without. It also finds
// where commands' cgroups can be made, and, for a worker running as root,
// takes the user namespace its commands' workspaces are idmapped with.
func probe(ctx context.Context, s *Sandbox) (Platform, error) {
	cfg := s.cfg
	root := os.Geteuid() == 0
	p := Platform{Confined: true, Network: cfg.Network, Limits: cfg.Limits, NPROC: !root, UID: os.Geteuid()}
	s.gid = os.Getegid()
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return p, fmt.Errorf("%w: the kernel has no Landlock (Linux 5.13+ with landlock in the lsm= boot parameter; landlock_create_ruleset: %v)", ErrUnavailable, err)
	}
	p.LandlockABI = abi
	if cfg.NoCgroup {
		p.NoCgroup = "Config.NoCgroup"
	} else if cg, err := findCgroups(cfg.Cgroup); err == nil {
		s.cgroups, p.Cgroup = &cg, cg.String()
	} else if cfg.Cgroup != "" {
		return p, fmt.Errorf("sandbox: %w", err)
	} else {
		p.NoCgroup = err.Error()
	}
	sp := &spec{
		Path: "/bin/true", Argv: []string{"true"}, Grants: append(append([]grant(nil), s.grants...), devices...),
		Limits: cfg.Limits, MemoryRlimit: s.cgroups == nil,
		Namespaces: true, Binds: append(append([]grant(nil), s.binds...), devices...), Links: s.links, SetIDs: root,
		MountProc: true, MountTmp: true, TmpSize: cfg.TmpSize,
		PIDMax: pidMax(cfg.Limits.Processes), Loopback: !cfg.Network, Seccomp: true, Probe: true,
	}
	var rep *report
	nsErr := errors.New("Config.NoNamespaces")
	if !cfg.NoNamespaces {
		ids := idMap{uid: os.Geteuid(), gid: os.Getegid()}
		if root {
			ids = idMap{hostID: cfg.HostID}
		}
		rep, nsErr = runProbe(ctx, sp, launchOpts{dir: "/", network: cfg.Network, ids: &ids})
	}
	if nsErr == nil {
		p.Namespaces, p.PrivateRoot, p.PrivateProc, p.PrivateTmp, p.PIDMax = true, true, rep.Proc, rep.Tmp, rep.PIDMax
		if root {
			// Commands run as HostID, their workspace seen through an
			// idmapped mount (its files stay the worker's on disk).
			userns, idErr := hostIDUserns(cfg.HostID)
			if idErr == nil && cfg.Workspaces != "" {
				var fd *os.File
				if fd, idErr = idmapped(cfg.Workspaces, userns); idErr == nil {
					fd.Close()
				} else {
					userns.Close()
				}
			}
			switch {
			case idErr == nil:
				s.userns, p.UID, s.gid, p.IDMapped = userns, cfg.HostID, cfg.HostID, true
			case cfg.AllowRoot:
				p.Missing = append(p.Missing, fmt.Sprintf("run commands as uid %d: %v", cfg.HostID, idErr))
				p.UID, s.gid = 0, 0
			default:
				return p, fmt.Errorf("%w: commands would run as the host's root: %s cannot be idmapped to run them as uid %d (%v); run the worker as another user, put the workspaces on a filesystem that supports idmapped mounts (ext4, xfs, btrfs, tmpfs...), or accept root with Config.AllowRoot", ErrRoot, cfg.Workspaces, cfg.HostID, idErr)
			}
		}
	} else {
		if ctx.Err() != nil {
			return p, fmt.Errorf("sandbox: probe: %w", ctx.Err())
		}
		p.NoNamespaces = nsErr.Error()
		*sp = spec{Path: sp.Path, Argv: sp.Argv, Grants: sp.Grants, Limits: sp.Limits, MemoryRlimit: sp.MemoryRlimit, RestrictNet: !cfg.Network, Seccomp: true, Probe: true}
		if rep, err = runProbe(ctx, sp, launchOpts{dir: "/", network: true}); err != nil {
			return p, err
		}
		if root && !cfg.AllowRoot {
			return p, fmt.Errorf("%w: without user namespaces (%s) commands would run as the host's root (without capabilities); run the worker as another user, allow it user namespaces, or accept root with Config.AllowRoot", ErrRoot, p.NoNamespaces)
		}
	}
	p.Missing = append(rep.Problems, p.Missing...)
	p.Seccomp = rep.Seccomp
	if !rep.Landlocked {
		return p, fmt.Errorf("%w: Landlock (ABI %d) did not confine the probe: %s", ErrUnavailable, abi, strings.Join(rep.Problems, "; "))
	}
	if !p.Seccomp && !p.Namespaces {
		return p, fmt.Errorf("%w: without namespaces, only seccomp keeps commands from the host's UNIX sockets, and it failed: %s", ErrUnavailable, strings.Join(rep.Problems, "; "))
	}
	return p, nil
}

// idMap is how a command's user namespace maps its ids: 0 to the host's
// uid and gid, and, with hostID (the worker runs as root: uid and gid are
// 0), 1 to hostID, which the helper becomes (see spec.SetIDs).
type idMap struct {
	uid, gid int
	hostID   int
}

// hostIDUserns returns a user namespace mapping 0 to hostID: the idmap of
// commands' workspaces. A helper is started in it for a moment (without a
// spec, it exits at once).
func hostIDUserns(hostID int) (*os.File, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer specR.Close()
	cmd := &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{helperArg0, "-test.run=^$"}, Env: []string{helperEnv + "=" + helperValue},
		ExtraFiles: []*os.File{specR},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER, Pdeathsig: syscall.SIGKILL,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: 1}},
		},
	}
	if err := cmd.Start(); err != nil {
		specW.Close()
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	userns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	specW.Close()
	cmd.Wait() //nolint:errcheck // it fails on the empty spec, as it should
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	return userns, nil
}

// idmapped clones dir as a detached mount idmapped with userns: its files,
// the worker's on disk, belong to the namespace's root (HostID), and what
// that root writes is the worker's on disk.
func idmapped(dir string, userns *os.File) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", dir, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID, Userns_fd: uint64(userns.Fd())}
	err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
	runtime.KeepAlive(userns)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("idmap %s: %w", dir, err)
	}
	return os.NewFile(uintptr(fd), "sandbox-workspace"), nil
}

// runProbe runs the helper in probe mode.
func runProbe(ctx context.Context, sp *spec, opts launchOpts) (*report, error) {
	h, err := launch(sp, opts)
	if err != nil {
		return nil, err
	}
	out := h.send(ctx)
	werr := h.cmd.Wait()
	var rep report
	if werr != nil || json.Unmarshal(out, &rep) != nil {
		if len(out) == 0 {
			return nil, fmt.Errorf("sandbox: the helper did not answer (%v): call sandbox.Main() first in main, and in TestMain of tests", werr)
		}
		return nil, fmt.Errorf("sandbox: %s", strings.TrimSpace(string(out)))
	}
	return &rep, nil
}

// launchOpts are how the helper is started.
type launchOpts struct {
	dir            string
	stdin          *os.File // nil: /dev/null
	stdout, stderr *os.File
	network        bool
	// ids: new namespaces, with the command's root mapped so; nil: none.
	ids *idMap
	// workspace is the idmapped workspace, passed on fd 5.
	workspace *os.File
	cg        *cgroup
}

// helperProc is a started helper waiting for its spec.
type helperProc struct {
	cmd    *exec.Cmd
	spec   []byte
	specW  *os.File
	report *os.File
}

// launch starts the helper, in its cgroup, and leaves it waiting for its
// spec (see send).
func launch(sp *spec, o launchOpts) (*helperProc, error) {
	b, err := json.Marshal(sp)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	defer specR.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		specW.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	defer repW.Close()
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if o.ids != nil {
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC
		if !o.network {
			attr.Cloneflags |= syscall.CLONE_NEWNET
		}
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: o.ids.uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: o.ids.gid, Size: 1}}
		if o.ids.hostID > 0 {
			attr.UidMappings = append(attr.UidMappings, syscall.SysProcIDMap{ContainerID: 1, HostID: o.ids.hostID, Size: 1})
			attr.GidMappings = append(attr.GidMappings, syscall.SysProcIDMap{ContainerID: 1, HostID: o.ids.hostID, Size: 1})
			attr.GidMappingsEnableSetgroups = true // the helper drops root's groups
		}
	}
	if o.cg != nil && o.cg.v2 {
		attr.UseCgroupFD, attr.CgroupFD = true, o.cg.fd
	}
	files := []*os.File{specR, repW}
	if o.workspace != nil {
		files = append(files, o.workspace)
	}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{helperArg0, "-test.run=^$"},
		Env: []string{helperEnv + "=" + helperValue}, Dir: o.dir,
		Stdout: writer(o.stdout), Stderr: writer(o.stderr), ExtraFiles: files, SysProcAttr: attr,
	}
	if o.stdin != nil {
		cmd.Stdin = o.stdin
	}
	if err := cmd.Start(); err != nil {
		specW.Close()
		repR.Close()
		return nil, fmt.Errorf("sandbox: start the helper: %w", err)
	}
	h := &helperProc{cmd: cmd, spec: b, specW: specW, report: repR}
	if o.cg != nil && !o.cg.v2 {
		// cgroup v1 has no CLONE_INTO_CGROUP: the helper is moved in
		// before it has its spec, so before it runs anything.
		if err := o.cg.add(cmd.Process.Pid); err != nil {
			h.abort()
			return nil, fmt.Errorf("sandbox: cgroup: %w", err)
		}
	}
	return h, nil
}

// abort kills a helper that did not get to run the command.
func (h *helperProc) abort() {
	h.specW.Close()
	h.report.Close()
	h.cmd.Process.Kill() //nolint:errcheck // it may have exited
	h.cmd.Wait()         //nolint:errcheck // it was killed
}

// send gives the helper its spec and returns what it wrote on fd 4 before
// it exec'd the command (or exited). ctx bounds this only.
func (h *helperProc) send(ctx context.Context) []byte {
	stop := context.AfterFunc(ctx, func() { h.cmd.Process.Kill() }) //nolint:errcheck // it may have exited
	defer stop()
	// A helper that died early fails this write; its exit says why.
	h.specW.Write(h.spec) //nolint:errcheck
	h.specW.Close()
	out, _ := io.ReadAll(io.LimitReader(h.report, maxReport))
	h.report.Close()
	return out
}

func (c *Cmd) startConfined(ctx context.Context) (err error) {
	if !filepath.IsAbs(c.dir) {
		return fmt.Errorf("sandbox: directory %q is not absolute", c.dir)
	}
	box := c.box
	p := box.platform
	grants := append(append(append([]grant(nil), box.grants...), devices...), grant{Path: c.dir, Dir: true, Write: true})
	sp := &spec{Path: c.path, Argv: c.argv, Env: c.env, Dir: c.dir, Grants: grants, Limits: box.cfg.Limits,
		MemoryRlimit: box.cgroups == nil, Seccomp: p.Seccomp}
	o := launchOpts{dir: c.dir, stdin: c.Stdin, stdout: c.stdout, stderr: c.stderr, network: p.Network}
	if p.Namespaces {
		ws := canonical(c.dir)
		sp.Namespaces, sp.MountProc, sp.MountTmp, sp.TmpSize, sp.Loopback = true, p.PrivateProc, p.PrivateTmp, box.cfg.TmpSize, !p.Network
		sp.Binds = append(append(append([]grant(nil), box.binds...), devices...), grant{Path: ws, Dir: true, Write: true})
		sp.Links = append(slices.Clone(box.links), hostLinks(c.dir)...)
		if p.PIDMax {
			sp.PIDMax = pidMax(p.Limits.Processes)
		}
		o.ids = &idMap{uid: p.UID, gid: box.gid}
		if p.IDMapped {
			o.ids = &idMap{hostID: p.UID}
			sp.SetIDs = true
			if o.workspace, err = idmapped(ws, box.userns); err != nil {
				return fmt.Errorf("sandbox: workspace: %w", err)
			}
			defer o.workspace.Close()
			sp.IDMapped = ws
		}
	} else {
		sp.RestrictNet = !p.Network
	}
	if box.cgroups != nil {
		if o.cg, err = box.cgroups.create(box.cfg.Limits); err != nil {
			return fmt.Errorf("sandbox: cgroup: %w", err)
		}
		defer func() {
			if err != nil {
				o.cg.remove() //nolint:errcheck // the start error says more
			}
		}()
	}
	h, err := launch(sp, o)
	if err != nil {
		return err
	}
	out := h.send(ctx)
	if len(out) > 0 || ctx.Err() != nil {
		h.cmd.Process.Kill() //nolint:errcheck // it may have exited
		h.cmd.Wait()         //nolint:errcheck // the helper failed; its message says why
		if len(out) == 0 {
			return fmt.Errorf("sandbox: %w", ctx.Err())
		}
		return fmt.Errorf("sandbox: %s", strings.TrimSpace(string(out)))
	}
	c.cmd, c.tree, c.cg = h.cmd, p.Namespaces, o.cg
	return nil
}
