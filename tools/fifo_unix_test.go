//go:build unix

package tools

import (
	"syscall"
	"testing"
)

// mkfifo creates a named pipe, which read and write must refuse without
// blocking.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}
