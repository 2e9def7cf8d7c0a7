//go:build unix

package secretexec

import (
	"os/exec"
	"syscall"
)

// killGroup runs cmd in a process group of its own and kills the whole
// group when it is stopped, so a child the command started (a shell's)
// does not outlive it holding its output.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
