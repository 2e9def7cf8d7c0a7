// Package sandbox runs a command (the exec tool's shell) confined to one
// directory, with the read-only system directories and nothing else of the
// machine it runs on, and bounds the filesystem the workspaces live on.
//
// # Security model: exec
//
// exec is off unless the operator starts the worker with --exec. Its
// commands come from the model, and so from whoever can publish a message:
// they are confined so that they reach only their session's workspace.
//
// Linux with Landlock and user namespaces (most distributions since 2022;
// kernel 5.13+, landlock in the lsm= list): each command runs in new user,
// mount, PID, IPC and network namespaces, as its PID namespace's init, in
// a root of its own: a read-only tmpfs holding only bind mounts of /usr,
// /bin, /sbin, /lib*, /etc, a few devices (/dev/null, /dev/zero,
// /dev/urandom…), its workspace, a fresh /proc of its own PID namespace and
// a private /tmp (a tmpfs); /run, /var, /home and the sockets in them do
// not exist there. A Landlock domain then grants read and execute on the
// system directories (of /etc only its world-readable files, never shadow,
// sudoers, private keys and the like) and read-write on the workspace and
// /tmp. It cannot see or signal the worker or other sessions' commands,
// read the worker's /proc entries (environment, command line), the
// auth-profiles file, the JetStream store, the configuration files or
// other workspaces (the fleet also denies those paths should they lie
// inside a system directory), reach the network (only its own loopback),
// mount anything or regain capabilities (they are dropped and
// no_new_privs is set).
//
// A worker that is not root runs commands as its own uid. A worker
// running as root (common in containers) runs them as host uid and gid
// 65534 (Config.HostID) without supplementary groups: a socket, file or
// process that trusts root does not trust them. Their workspace is seen
// through an idmapped mount, so its files stay root's on disk and the
// worker's file tools and the commands share them. Where that cannot be
// (no user namespaces, or a workspace filesystem without idmapped mounts:
// Linux 5.12+ ext4, xfs, btrfs; 6.3+ tmpfs), [New] fails with [ErrRoot]
// unless Config.AllowRoot accepts commands running as root without
// capabilities.
//
// A seccomp filter, installed last before the command runs, refuses
// socket(AF_UNIX) and datagram socketpair(AF_UNIX) with EACCES (Landlock,
// up to ABI 7, does not mediate connect(2) to a socket's path), io_uring
// (which makes and connects sockets without these calls) with ENOSYS, and
// kills a process that makes a system call of another ABI (i386, x32).
//
// Each command runs in a cgroup of its own, killed as a whole when it ends
// (timeout, abort or exit) and removed: memory (4 GiB, no swap; v2 kills
// the whole command past it, v1 its largest process), processes and
// threads (256) and CPU share (1 CPU) bound the command, not each process.
// cgroup v2 is used where memory, pids and cpu are delegated (Config.Cgroup,
// or the worker's cgroup or its parent having them enabled for children),
// else cgroup v1 (the worker's cgroup in the memory, pids and cpu
// hierarchies). Where neither can be made (an unprivileged worker without
// delegation) the platform line says "NO CGROUP" and only rlimits bound
// each process: memory is then its address space (RLIMIT_AS), processes
// are bounded by RLIMIT_NPROC (counted within the command's own user
// namespace; root is exempt) and, on Linux 6.14+, the PID namespace's
// pid_max, and the CPU share is not bounded. Always, per process: CPU time
// 10 min, file size 1 GiB, open files 1024, no core dumps. Being init, the
// shell ignores signals sent from inside the namespace (kill $$ does
// nothing).
//
// Linux with Landlock but without user namespaces (refused by the kernel or
// a security module): the same Landlock domain, without the own root,
// /proc and /tmp; TCP connect and bind are forbidden (Landlock ABI 4+),
// signals and abstract UNIX sockets stay within the command (ABI 6+); the
// same seccomp filter (required here), cgroup and limits. Without a cgroup
// the process group is killed at timeout, abort and exit, and a process
// that leaves the group (setsid) survives.
//
// Linux without Landlock (before 5.13, or not enabled), macOS and other
// systems: no confinement. --exec refuses to start, naming what is missing,
// unless the operator also gives --exec-unconfined, meant for tests only:
// commands then run with the worker's privileges and see all it sees, in
// their own process group, which is killed at timeout, abort and exit.
//
// Everywhere the environment is built from scratch (PATH, HOME, the
// skills' variables), stdin is empty (for
// the process tool's background commands, a pipe it writes), and the command runs in its
// session's workspace.
//
// # Disk
//
// Commands write their workspace, which without a bound can fill the
// filesystem it is on, the JetStream store's by default. [MountDisk]
// makes the workspaces' root a filesystem of bounded size: a loop-mounted
// ext4 image (sparse, persistent across restarts; it needs root, loop
// devices and mkfs.ext4), unless the root is a filesystem of its own
// already (a tmpfs or volume the operator mounted). A write beyond it
// fails with ENOSPC.
//
// # How
//
// Go cannot run code between fork and exec, so confinement is applied by a
// helper: the worker's own binary, started again as /proc/self/exe in the
// new namespaces (and, cgroup v2, in the command's cgroup) with a marker
// only the sandbox sets ([Main] must be the first call of main, and of
// TestMain in tests that confine). The helper reads its instructions from
// a pipe the worker writes once it is in its cgroup (cgroup v1 moves it
// there first), builds the command's root and pivots into it, applies
// Landlock, takes the command's uid (a root worker's helper starts as root
// to read what it binds), drops capabilities, sets the limits, installs
// the seccomp filter and execs the command, reporting any failure on a
// pipe that closes at that exec. [New] runs it once to find out what the
// platform gives; [Platform.String] says it in one line for the worker's
// log.
//
// Files: sandbox.go (configuration, platform, commands), grants.go (what
// is granted), confine_linux.go (the helper and its start), root_linux.go
// (the command's root), seccomp_linux.go (the filter), cgroup_linux.go
// (cgroups), disk_linux.go (the workspaces' filesystem).
package sandbox
