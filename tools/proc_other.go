//go:build !unix

package tools

import (
	"os"
	"os/exec"
)

// oNonblock is 0 where FIFOs cannot block an open.
const oNonblock = 0

// setProcessGroup is a no-op without Unix process groups.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup kills the shell only: without Unix process groups its
// children may survive.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		cmd.Process.Kill() //nolint:errcheck // best effort
	}
}

// exitSignal is "" where processes do not end by signals.
func exitSignal(*os.ProcessState) string { return "" }
