package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/lanefleet/lanefleet/sanitize/sanitizecmd"
)

// sanitizeCommand is `worker sanitize`: it prints the history a provider
// would be sent, so users can see why a provider rejects theirs. Its flags
// are cobra's, GNU-style like every other command's (they were Go's
// single-dash flags).
func sanitizeCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var (
		o       sanitizecmd.Options
		allowed string
	)
	c := &cobra.Command{
		Use:   "sanitize --provider P --api A --model M [--allowed-tools a,b] [--history-limit N] [--stage sanitized|final] < history.json",
		Short: "Print the history a provider would be sent (reads a JSON message array or a session file on stdin)",
		Long:  sanitizecmd.Long,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.AllowedTools = splitList(allowed)
			err := sanitizecmd.Run(cmd.Context(), o, stdin, stdout, stderr)
			if errors.Is(err, sanitizecmd.ErrUsage) {
				return usageError{err}
			}
			return err
		},
	}
	fs := c.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.Provider, "provider", "", "provider id, e.g. anthropic, openai, openrouter")
	fs.StringVar(&o.API, "api", "", "model API, e.g. anthropic-messages, openai-responses, google-generative-ai")
	fs.StringVar(&o.Model, "model", "", "model id, e.g. claude-opus-4-6")
	fs.StringVar(&allowed, "allowed-tools", "", "comma-separated tool names; calls of other tools are dropped")
	fs.IntVar(&o.HistoryLimit, "history-limit", 0, "keep only the last N user turns (0 = all)")
	fs.StringVar(&o.Stage, "stage", "final", "sanitized or final")
	fs.Int64Var(&o.Now, "now", 0, "clock in Unix milliseconds for synthetic messages (default: the current time)")
	return c
}
