//go:build unix

package tools

import (
	"os"
	"testing"
)

// TestWritersGone: the read end of a pipe says its writers are gone only
// once every write end is closed, data still unread or not.
func TestWritersGone(t *testing.T) {
	t.Parallel()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if writersGone(pr) {
		t.Fatal("gone with its writer open")
	}
	if _, err := pw.WriteString("left in the pipe"); err != nil {
		t.Fatal(err)
	}
	if writersGone(pr) {
		t.Fatal("gone with its writer open and data in it")
	}
	pw.Close()
	if !writersGone(pr) {
		t.Fatal("not gone with every writer closed and data unread")
	}
}
