//go:build unix

package tools

import (
	"os"
	"syscall"
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
