package main

import (
	"io"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/mcpserver"
)

// stdioCaller is the caller of `publisher mcp`: it reaches every session,
// so what it may do is what the NATS user may do (the fleet's NATS
// permissions refuse the rest, and the tool says so).
var stdioCaller = &auth.Principal{Name: "publisher mcp", Role: auth.Admin, Prefixes: []string{""}, Local: true}

func mcpCommand(c *common) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the fleet as an MCP server on stdin and stdout, for desktop MCP clients",
		Long: `mcp serves the fleet as an MCP server (Model Context Protocol, stdio transport)
until its client closes stdin: the tools send_message (send a message to a
session and wait for the reply, streamed as progress notifications),
get_run, read_history and list_sessions. An MCP client's configuration runs it
as a command, e.g. {"command": "publisher", "args": ["mcp", "--creds",
"alice.creds"]}. What it may do is what its NATS user may do: a sender
reaches its sessions, and list_sessions takes the admin role. Warnings go to
stderr; stdout carries MCP alone.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, _, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			log := zerolog.New(c.stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger()
			srv, err := mcpserver.New(mcpserver.Config{Client: cl, Logger: &log})
			if err != nil {
				return err
			}
			in, ok := c.stdin.(io.ReadCloser)
			if !ok {
				in = io.NopCloser(c.stdin)
			}
			return srv.ServeIO(cmd.Context(), stdioCaller, in, nopCloser{c.stdout})
		},
	}
}

// nopCloser is a writer whose Close leaves it open (stdout outlives the
// MCP connection).
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
