// Package sandbox runs a command (the exec tool's shell) confined to one
// directory, with the read-only system directories and nothing else of the
// machine it runs on.
//
// # Security model: exec
//
// exec is off unless the operator starts the worker with --exec. Its
// commands come from the model, and so from whoever can publish a message:
// they are confined so that they reach only their session's workspace.
//
// Linux with Landlock and unprivileged user namespaces (most distributions
// since 2022; kernel 5.13+, landlock in the lsm= list): each command runs in
// new user, mount, PID, IPC and network namespaces, as its PID namespace's
// init, under a Landlock domain that grants read and execute on /usr, /bin,
// /sbin, /lib*, /etc (only its world-readable files, never shadow, sudoers,
// private keys and the like), a few devices (/dev/null, /dev/zero,
// /dev/urandom…) and a fresh /proc of its own PID namespace, and read-write
// on its workspace and a private /tmp (a tmpfs). It cannot see or signal the
// worker or other sessions' commands, read the worker's /proc entries
// (environment, command line), the auth-profiles file, the JetStream store,
// the configuration files or other workspaces (the fleet also denies those
// paths should they lie inside a system directory), reach the network
// (only its own loopback), mount anything or regain capabilities (they are
// dropped and no_new_privs is set). rlimits bound each process: CPU time
// (10 min), address space (4 GiB), file size (1 GiB), open files (1024), no
// core dumps; processes are bounded by RLIMIT_NPROC (256, counted within
// the command's own user namespace; a worker running as root is exempt) and,
// on Linux 6.14+, by the PID namespace's pid_max (301 at least). At timeout,
// abort or when the shell exits, killing the namespace's init kills every
// process it started, setsid and daemonized ones included. Being init, the
// shell ignores signals sent from inside the namespace (kill $$ does
// nothing).
//
// Linux with Landlock but without user namespaces (refused by the kernel or
// a security module): the same Landlock domain, without /proc and /tmp;
// TCP connect and bind are forbidden (Landlock ABI 4+), signals and
// abstract UNIX sockets stay within the command (ABI 6+); the same rlimits.
// The process group is killed at timeout, abort and exit; a process that
// leaves the group (setsid) survives.
//
// Linux without Landlock (before 5.13, or not enabled), macOS and other
// systems: no confinement. --exec refuses to start, naming what is missing,
// unless the operator also gives --exec-unconfined: commands then run with
// the worker's privileges and see all it sees, in their own process group,
// which is killed at timeout, abort and exit.
//
// Everywhere the environment is built from scratch (PATH, HOME, the
// skills' variables), stdin is empty, and the command runs in its
// session's workspace.
//
// # How
//
// Go cannot run code between fork and exec, so confinement is applied by a
// helper: the worker's own binary, started again as /proc/self/exe in the
// new namespaces with a marker only the sandbox sets ([Main] must be the
// first call of main, and of TestMain in tests that confine). The helper
// reads its instructions from a memfd, mounts, applies Landlock, drops
// capabilities, sets the limits and execs the command, reporting any
// failure on a pipe that closes at that exec. [New] runs it once to find
// out what the platform gives; [Platform.String] says it in one line for
// the worker's log.
package sandbox
