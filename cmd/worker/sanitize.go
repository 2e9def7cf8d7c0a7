package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lanefleet/lanefleet/sanitize/sanitizecmd"
)

// sanitizeCommand is `worker sanitize`: it prints the history a provider
// would be sent, so users can see why a provider rejects theirs. Its flags
// are sanitizecmd's own.
func sanitizeCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:                "sanitize --provider P --api A --model M < history.json",
		Short:              "Print the history a provider would be sent (reads a JSON message array on stdin)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := sanitizecmd.Run(cmd.Context(), args, stdin, stdout, stderr)
			switch {
			case errors.Is(err, pflag.ErrHelp):
				return nil
			case errors.Is(err, sanitizecmd.ErrUsage):
				return usageError{err}
			}
			return err
		},
	}
}
