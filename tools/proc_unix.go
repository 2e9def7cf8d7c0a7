//go:build unix

package tools

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// oNonblock makes opening a FIFO fail or return at once instead of blocking.
const oNonblock = syscall.O_NONBLOCK

// exitSignal names the signal that ended the process, or "".
func exitSignal(state *os.ProcessState) string {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "SIG" + signame(ws.Signal())
	}
	return ""
}

func signame(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "KILL"
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGINT:
		return "INT"
	case syscall.SIGHUP:
		return "HUP"
	case syscall.SIGQUIT:
		return "QUIT"
	case syscall.SIGPIPE:
		return "PIPE"
	case syscall.SIGSEGV:
		return "SEGV"
	case syscall.SIGABRT:
		return "ABRT"
	case syscall.SIGBUS:
		return "BUS"
	case syscall.SIGFPE:
		return "FPE"
	case syscall.SIGILL:
		return "ILL"
	case syscall.SIGUSR1:
		return "USR1"
	case syscall.SIGUSR2:
		return "USR2"
	case syscall.SIGALRM:
		return "ALRM"
	}
	return "(" + s.String() + ")"
}

// writersGone reports whether every writer of the pipe whose read end is
// f has closed it (the kernel flags the read end POLLHUP): what is left
// of its output is in the pipe already, and its end follows.
func writersGone(f *os.File) bool {
	sc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = sc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			gone = fds[0].Revents&unix.POLLHUP != 0
		}
	})
	return gone
}
