//go:build !unix

package secretexec

import "os/exec"

// killGroup leaves cmd's default: Kill stops the command only.
func killGroup(*exec.Cmd) {}
