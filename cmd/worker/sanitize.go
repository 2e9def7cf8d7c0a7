package main

import (
	"context"
	"io"

	"github.com/lanefleet/lanefleet/sanitize/sanitizecmd"
)

// sanitize runs `worker sanitize`: it prints the history a provider would be
// sent, so users can see why a provider rejects theirs.
func sanitize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return sanitizecmd.Run(context.Background(), args, stdin, stdout, stderr)
}
