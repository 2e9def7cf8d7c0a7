//go:build !unix

package tools

import "testing"

// mkfifo skips the test where there are no named pipes.
func mkfifo(t *testing.T, _ string) {
	t.Helper()
	t.Skip("no named pipes")
}
