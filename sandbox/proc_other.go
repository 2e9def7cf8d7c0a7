//go:build !unix

package sandbox

import "os/exec"

// setProcessGroup is a no-op without Unix process groups.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup is a no-op without Unix process groups: only the
// command's first process is killed.
func killProcessGroup(int) {}
