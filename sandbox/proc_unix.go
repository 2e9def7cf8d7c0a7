//go:build unix

package sandbox

import (
	"os/exec"
	"syscall"
)

// setProcessGroup makes the command the leader of a new process group, so
// that killProcessGroup reaches every process it starts (but those that
// leave the group with setsid or setpgid).
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// killProcessGroup sends SIGKILL to the process group led by pid.
func killProcessGroup(pid int) {
	syscall.Kill(-pid, syscall.SIGKILL) //nolint:errcheck // the group may be gone
}
