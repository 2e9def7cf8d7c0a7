package main

import (
	"errors"
	"io"
)

// sanitize is wired to the sanitize package's command once it lands.
func sanitize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return errors.New("sanitize: not available in this build yet")
}
