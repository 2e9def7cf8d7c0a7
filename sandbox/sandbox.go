package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Defaults of the Limits and Config, used for every value left zero.
const (
	// DefaultCPUTime is the CPU time each process may use (RLIMIT_CPU).
	DefaultCPUTime = 10 * time.Minute
	// DefaultCPUs is the CPU share of one command, in CPUs (its cgroup's
	// quota).
	DefaultCPUs = 1.0
	// DefaultMemory is the memory of one command (its cgroup's), or
	// without a cgroup the address space of each process (RLIMIT_AS).
	DefaultMemory = 4 << 30
	// DefaultProcesses bounds the processes and threads of one command.
	DefaultProcesses = 256
	// DefaultFileSize is the largest file a process may write (RLIMIT_FSIZE).
	DefaultFileSize = 1 << 30
	// DefaultOpenFiles is the open files of each process (RLIMIT_NOFILE).
	DefaultOpenFiles = 1024
	// DefaultTmpSize is the size of the private /tmp of one command.
	DefaultTmpSize = 256 << 20
	// DefaultHostID is the host uid and gid commands run as when the
	// worker runs as root: nobody and nogroup.
	DefaultHostID = 65534
)

var (
	// ErrUnavailable is returned (wrapped, with what is missing) by [New]
	// when the platform cannot confine commands and Config.Unconfined is
	// not set.
	ErrUnavailable = errors.New("sandbox: confinement is not available")
	// ErrRoot is returned (wrapped, with why) by [New] when the worker
	// runs as root and commands cannot be run as Config.HostID, unless
	// Config.AllowRoot is set.
	ErrRoot = errors.New("sandbox: commands would run as root")
)

// Limits are the resource limits of a confined command. With a cgroup
// (see [Platform].Cgroup) memory, processes and CPU share bound the command
// as a whole; the rlimits, set as both soft and hard limit so no process of
// the command can raise them, bound each of its processes.
type Limits struct {
	// CPUTime is the CPU time of each process, in whole seconds (rounded
	// up); a process that uses it up is killed (SIGKILL).
	CPUTime time.Duration
	// CPUs is the CPU share of the whole command (its cgroup's quota:
	// 0.5 is half of one CPU's time); unbounded without a cgroup.
	CPUs float64
	// Memory in bytes is the memory of the whole command (its cgroup's,
	// no swap; past it the kernel kills the command, cgroup v2, or its
	// largest process, v1), or without a cgroup the address space of each
	// process (RLIMIT_AS).
	Memory int64
	// Processes bounds the processes and threads of the command: as its
	// cgroup's pids.max, as RLIMIT_NPROC (counted per command in its own
	// user namespace; root is exempt) and, where the kernel has one per
	// PID namespace (Linux 6.14+), as its pid_max (at least 301, the
	// kernel's minimum).
	Processes int
	// FileSize is the largest file a process may write, in bytes.
	FileSize int64
	// OpenFiles is the number of open files of each process.
	OpenFiles int
}

// Config says how commands are confined.
type Config struct {
	// Unconfined runs commands with the worker's privileges, only in their
	// own process group: the operator's explicit choice where the platform
	// cannot confine them or they need what confinement takes away.
	Unconfined bool
	// ReadOnly are files or directories commands may read besides the
	// system directories (for example a skills directory).
	ReadOnly []string
	// Deny are files or directories never granted, even when they lie
	// inside a read-only directory: the worker's data directory, its
	// credentials, the other workspaces.
	Deny []string
	// Network keeps the host's network. By default a command gets a
	// network namespace of its own with only a loopback interface (and,
	// without namespaces, Landlock forbids TCP connect and bind).
	Network bool
	// NoNamespaces confines with Landlock and rlimits only, as on kernels
	// that refuse unprivileged user namespaces (tests use it to check that
	// Landlock alone holds).
	NoNamespaces bool
	// Limits are the resource limits of each command; zero fields take
	// the Default* values.
	Limits Limits
	// TmpSize is the size of the private /tmp (tmpfs) each command gets
	// where it has a mount namespace; zero means DefaultTmpSize.
	TmpSize int64

	// HostID is the host uid and gid commands run as, without
	// supplementary groups, when the worker runs as root (the helper
	// builds their root as the host's root, then takes HostID; their
	// workspace is idmapped so that its files stay the worker's); zero
	// means DefaultHostID. A worker that is not root runs them as itself.
	HostID int
	// AllowRoot lets commands run as the host's root (capabilities
	// dropped, still under Landlock and seccomp) where the worker runs as
	// root and they cannot run as HostID: without user namespaces, or
	// with Workspaces on a filesystem that cannot be idmapped. Without
	// it, New fails there with [ErrRoot].
	AllowRoot bool
	// Workspaces is the directory commands' directories lie in, if known:
	// New checks that it can be idmapped when the worker runs as root.
	Workspaces string
	// Cgroup is a cgroup v2 directory delegated to the worker (it holds
	// no process; New enables memory, pids and cpu for its children)
	// where each command gets a cgroup. Empty: found as [Platform] says.
	Cgroup string
	// NoCgroup bounds commands by rlimits only, as where no cgroup can be
	// made (tests use it to check what remains).
	NoCgroup bool
}

func (c Config) withDefaults() Config {
	l := &c.Limits
	if l.CPUTime <= 0 {
		l.CPUTime = DefaultCPUTime
	}
	if l.CPUs <= 0 {
		l.CPUs = DefaultCPUs
	}
	if l.Memory <= 0 {
		l.Memory = DefaultMemory
	}
	if l.Processes <= 0 {
		l.Processes = DefaultProcesses
	}
	if l.FileSize <= 0 {
		l.FileSize = DefaultFileSize
	}
	if l.OpenFiles <= 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	if c.TmpSize <= 0 {
		c.TmpSize = DefaultTmpSize
	}
	if c.HostID <= 0 {
		c.HostID = DefaultHostID
	}
	return c
}

// Platform is what confinement commands get on this machine, as found by
// [New].
type Platform struct {
	// Confined is false when Config.Unconfined was set.
	Confined bool
	// LandlockABI is the kernel's Landlock ABI version (0: none).
	LandlockABI int
	// Namespaces: each command runs in new user, mount, PID and IPC
	// namespaces (and a network namespace unless Network), in a root of
	// its own holding only what it is granted (PrivateRoot), sees a /proc
	// of its own PID namespace (PrivateProc) and a private /tmp
	// (PrivateTmp); its whole process tree dies with it.
	Namespaces  bool
	PrivateRoot bool
	PrivateProc bool
	PrivateTmp  bool
	// UID is the host uid commands run as; IDMapped: the worker runs as
	// root, commands as Config.HostID, their workspace idmapped.
	UID      int
	IDMapped bool
	// Seccomp: a filter refuses UNIX sockets and io_uring to commands.
	Seccomp bool
	// Cgroup says where each command's cgroup is made (memory, processes
	// and CPU share bounded as a whole, every process killed at its end);
	// empty when none can be, and NoCgroup says why.
	Cgroup   string
	NoCgroup string
	// NoNamespaces says why Namespaces is false.
	NoNamespaces string
	// Missing lists the parts of the confinement the probe found not to
	// work (for example a pid_max this kernel keeps global).
	Missing []string
	// PIDMax: the PID namespace's pid_max bounds the command's processes.
	PIDMax bool
	// NPROC: RLIMIT_NPROC bounds them (false when the worker runs as
	// root, which the kernel exempts).
	NPROC bool
	// Network: the command reaches the host's network.
	Network bool
	Limits  Limits
}

// String describes the platform in one line for the worker's log.
func (p Platform) String() string {
	if !p.Confined {
		return "UNCONFINED: commands run with the worker's privileges and see all it sees, only in their own process group (for tests)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "landlock ABI %d (read-only system directories, read-write workspace)", p.LandlockABI)
	if p.Namespaces {
		b.WriteString("; namespaces user+mount+pid+ipc")
		if !p.Network {
			b.WriteString("+net")
		}
		if p.PrivateRoot {
			b.WriteString(", own root (no /run, /var, /home)")
		}
		if p.PrivateProc {
			b.WriteString(", private /proc")
		}
		if p.PrivateTmp {
			b.WriteString(", private /tmp")
		}
	} else {
		fmt.Fprintf(&b, "; no namespaces (%s): no /proc, no /tmp", p.NoNamespaces)
	}
	switch {
	case p.UID == 0:
		b.WriteString("; runs as the host's root (no capabilities)")
	case p.IDMapped:
		fmt.Fprintf(&b, "; runs as host uid %d (workspace idmapped)", p.UID)
	default:
		fmt.Fprintf(&b, "; runs as the worker's uid %d", p.UID)
	}
	if p.Seccomp {
		b.WriteString("; seccomp: no UNIX sockets, no io_uring")
	}
	if p.Network {
		b.WriteString("; host network")
	} else {
		b.WriteString("; no network")
	}
	procs := "unbounded (root is exempt from RLIMIT_NPROC and the kernel has no per-namespace pid_max)"
	switch {
	case p.Cgroup != "":
		procs = fmt.Sprintf("%d", p.Limits.Processes)
	case p.NPROC && p.PIDMax:
		procs = fmt.Sprintf("%d (rlimit and pid_max)", p.Limits.Processes)
	case p.NPROC:
		procs = fmt.Sprintf("%d (rlimit)", p.Limits.Processes)
	case p.PIDMax:
		procs = fmt.Sprintf("%d (pid_max)", pidMax(p.Limits.Processes))
	}
	if p.Cgroup != "" {
		fmt.Fprintf(&b, "; per command, in a %s killed as a whole: memory %s, processes %s, cpu %g",
			p.Cgroup, size(p.Limits.Memory), procs, p.Limits.CPUs)
		b.WriteString("; per process: ")
	} else {
		fmt.Fprintf(&b, "; NO CGROUP (%s): per process only: memory %s (address space), processes %s, cpu share unbounded, ",
			p.NoCgroup, size(p.Limits.Memory), procs)
	}
	fmt.Fprintf(&b, "cpu time %s, file size %s, open files %d", p.Limits.CPUTime, size(p.Limits.FileSize), p.Limits.OpenFiles)
	if p.Cgroup == "" && !p.Namespaces {
		b.WriteString("; a process that leaves the process group (setsid) survives the command")
	}
	if len(p.Missing) > 0 {
		fmt.Fprintf(&b, "; not available: %s", strings.Join(p.Missing, "; "))
	}
	return b.String()
}

func size(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dB", n)
}

// pidMax is the pid_max of a command's PID namespace for a process limit.
func pidMax(processes int) int { return max(processes+1, 301) }

// Sandbox starts confined commands. It is safe for concurrent use.
type Sandbox struct {
	cfg      Config
	platform Platform
	// grants are the read-only paths, expanded once from the system
	// directories, Config.ReadOnly and Config.Deny; binds are the roots
	// of those a private root binds, links the host's symbolic links on
	// the way to them.
	grants []grant
	binds  []grant
	links  []link
	// cgroups is where commands' cgroups are made; nil: none.
	cgroups *cgroups
	// userns maps the root of commands' namespaces to Config.HostID: the
	// workspace of each is idmapped with it (worker running as root).
	userns *os.File
	// gid is the host gid commands run as (with namespaces).
	gid int
}

// New finds out what the platform gives and returns a Sandbox that confines
// every command as much as it can. On Linux this runs the helper once (see
// [Main]), so the binary must call Main first thing.
//
// Without Landlock (or off Linux) New fails with an error wrapping
// [ErrUnavailable] that says what is missing, unless cfg.Unconfined is set.
func New(ctx context.Context, cfg Config) (*Sandbox, error) {
	cfg = cfg.withDefaults()
	for _, p := range append(append([]string(nil), cfg.ReadOnly...), cfg.Deny...) {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("sandbox: path %q is not absolute", p)
		}
	}
	for _, p := range cfg.ReadOnly {
		if canonical(p) == "/" {
			return nil, errors.New("sandbox: / is not a read-only path: it would grant the whole machine")
		}
	}
	if cfg.Workspaces != "" && !filepath.IsAbs(cfg.Workspaces) {
		return nil, fmt.Errorf("sandbox: workspaces %q is not absolute", cfg.Workspaces)
	}
	s := &Sandbox{cfg: cfg, platform: Platform{Limits: cfg.Limits, Network: true, UID: os.Geteuid()}}
	if cfg.Unconfined {
		return s, nil
	}
	var err error
	if s.grants, s.binds, err = readOnlyGrants(systemDirs, privateDirs, cfg.ReadOnly, cfg.Deny); err != nil {
		return nil, err
	}
	s.binds = bindsBelow(s.binds, s.grants, "/tmp")
	s.links = hostLinks(append(slices.Clone(systemDirs), cfg.ReadOnly...)...)
	if s.platform, err = probe(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// Platform returns what confinement commands get.
func (s *Sandbox) Platform() Platform { return s.platform }

// Cmd is a command prepared by [Sandbox.Command]. Its stdin is empty
// unless Stdin is set.
type Cmd struct {
	// Stdin, when set before Start, is the command's standard input (the
	// read end of a pipe the caller writes, for the process tool); nil
	// is /dev/null.
	Stdin *os.File
	// Stdout and Stderr receive the output; nil discards it. Set them
	// before Start. A writer that is not an *os.File is fed from a pipe
	// until every process holding it is gone (see Wait).
	Stdout, Stderr io.Writer

	box  *Sandbox
	path string
	argv []string
	dir  string
	env  []string
	cmd  *exec.Cmd
	// tree: the command's processes die with its first one (the init of
	// its PID namespace); otherwise the process group is killed.
	tree bool
	// cg is the command's cgroup (nil: none), killed and removed when it
	// ends.
	cg *cgroup
	// stdout and stderr are the files the process writes to; copies feed
	// the writers that are not files, and end at EOF.
	stdout, stderr *os.File
	copies         []chan struct{}
}

// outputs sets c.stdout and c.stderr: the writers that are files, else
// pipes copied to them. The write ends are closed after the start
// (closeOutputs), so that a copy ends when the processes are gone.
func (c *Cmd) outputs() error {
	file := func(w io.Writer) (*os.File, error) {
		if w == nil {
			return nil, nil
		}
		if f, ok := w.(*os.File); ok {
			return f, nil
		}
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			io.Copy(w, r) //nolint:errcheck // ends at EOF
			r.Close()
		}()
		c.copies = append(c.copies, done)
		return pw, nil
	}
	var err error
	if c.stdout, err = file(c.Stdout); err != nil {
		return err
	}
	if c.Stderr == c.Stdout {
		c.stderr = c.stdout
		return nil
	}
	c.stderr, err = file(c.Stderr)
	return err
}

// writer is f, or nil (/dev/null for exec.Cmd) when f is nil.
func writer(f *os.File) io.Writer {
	if f == nil {
		return nil
	}
	return f
}

// closeOutputs closes this process's write ends of the pipes outputs made.
func (c *Cmd) closeOutputs() {
	for _, f := range []*os.File{c.stdout, c.stderr} {
		if f != nil && f != c.Stdout && f != c.Stderr {
			f.Close()
		}
	}
}

// Command prepares path with argv (argv[0] first) to run in dir (absolute)
// with exactly env. Confined, the command may read the system directories
// and write only dir (and its private /tmp).
func (s *Sandbox) Command(dir string, env []string, path string, argv ...string) *Cmd {
	if env == nil {
		env = []string{} // never the process's own
	}
	return &Cmd{box: s, path: path, argv: argv, dir: dir, env: env}
}

// Start starts the command; when confined, it returns once the confinement
// is in place and the command runs, or with the error that stopped it. ctx
// bounds the start only; use Kill to stop the command.
func (c *Cmd) Start(ctx context.Context) error {
	if c.cmd != nil || c.stdout != nil || c.stderr != nil {
		return errors.New("sandbox: command already started")
	}
	if err := c.outputs(); err != nil {
		return err
	}
	defer c.closeOutputs()
	if !c.box.platform.Confined {
		cmd := &exec.Cmd{Path: c.path, Args: c.argv, Dir: c.dir, Env: c.env, Stdout: writer(c.stdout), Stderr: writer(c.stderr)}
		if c.Stdin != nil {
			cmd.Stdin = c.Stdin
		}
		setProcessGroup(cmd)
		if err := cmd.Start(); err != nil {
			return err
		}
		c.cmd = cmd
		return nil
	}
	return c.startConfined(ctx)
}

// Wait waits for the command to exit, then kills whatever it left running
// (its cgroup, and its process group; with a PID namespace, the kernel
// already did) and removes its cgroup, then waits for the copies of its
// output to end: a process left outside all three (setsid, without
// namespaces or cgroup) that holds its output keeps it waiting. Its error
// is that of [exec.Cmd.Wait], joined with any failure to remove the
// cgroup.
func (c *Cmd) Wait() error {
	if c.cmd == nil {
		return errors.New("sandbox: command not started")
	}
	err := c.cmd.Wait()
	if !c.tree {
		killProcessGroup(c.cmd.Process.Pid)
	}
	if c.cg != nil {
		if rerr := c.cg.remove(); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	for _, done := range c.copies {
		<-done
	}
	return err
}

// Kill kills the command and every process it started. It may be called
// concurrently with Wait.
func (c *Cmd) Kill() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	// The first process dies first (with a PID namespace it takes every
	// other one with it; else its whole group at once): a shell that
	// outlived a child the cgroup's one-by-one kill reached first reported
	// it ("Killed") and exited 137 on its own, which a loaded machine gave
	// it time to do.
	if !c.tree {
		killProcessGroup(c.cmd.Process.Pid)
	}
	c.cmd.Process.Kill() //nolint:errcheck // it may have exited
	if c.cg != nil {
		c.cg.kill()
	}
}

// ProcessState is the state of the exited command (nil before Wait).
func (c *Cmd) ProcessState() *os.ProcessState {
	if c.cmd == nil {
		return nil
	}
	return c.cmd.ProcessState
}
