package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	lanefleet "github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/version"
	"github.com/lanefleet/lanefleet/mcpbridge"
	"github.com/lanefleet/lanefleet/redact"
)

// loadMCP reads an MCP config for --mcp or mcp-bridge --config: a bad file
// is a usage error, found before anything connects. The values taken from
// the environment (tokens in headers and env) join the redactor.
func loadMCP(path string, env func(string) string, red *redact.Redactor) ([]mcpbridge.Server, error) {
	servers, err := mcpbridge.LoadConfig(path, env)
	if err != nil {
		return nil, usageError{err}
	}
	for _, s := range servers {
		for _, v := range s.Env {
			red.Add(v)
		}
		for _, v := range s.Headers {
			red.Add(v)
		}
	}
	return servers, nil
}

// runMCPBridge serves servers' tools on nc until ctx ends; served, when
// not nil, is called each time a server's tools are served.
func runMCPBridge(ctx context.Context, nc *nats.Conn, servers []mcpbridge.Server, env func(string) string, log zerolog.Logger, served func(string)) error {
	br, err := mcpbridge.New(mcpbridge.Config{Servers: servers, Conn: nc, Version: version.Get().Version, Getenv: env,
		Served: served, Logger: log.With().Str("component", "mcp-bridge").Logger()})
	if err != nil {
		return err
	}
	return br.Run(ctx)
}

// mcpBridgeCommand is `worker mcp-bridge`: it serves the tools of the MCP
// servers of a config as remote tools, in a process of its own.
func mcpBridgeCommand(red *redact.Redactor, stderr io.Writer, env func(string) string) *cobra.Command {
	var (
		config, natsURL, logFormat, logLevel string
		creds                                lanefleet.Credentials
	)
	c := &cobra.Command{
		Use:   "mcp-bridge --config mcp.json",
		Short: "Serve the tools of MCP servers to the fleet as remote tools",
		Long: `mcp-bridge connects to the MCP servers of --config (the "mcpServers" format of
MCP clients: "command"/"args"/"env" for stdio, "url"/"headers" for streamable
HTTP, with "type": "sse" for SSE; ${VAR} in env, headers and url comes from the
environment) and serves each server's tools as remote tools named
<server>__<tool>, which workers use once --remote-tools allows them (e.g.
github__*). Run several for the same servers: they share the calls.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" {
				return usageError{errors.New("--config is required")}
			}
			servers, err := loadMCP(config, env, red)
			if err != nil {
				return err
			}
			log, err := newLogger(stderr, logFormat, logLevel)
			if err != nil {
				return usageError{err}
			}
			copts, err := creds.Or(lanefleet.CredentialsFromEnv(env)).Options()
			if err != nil {
				return usageError{err}
			}
			red.Add(envSecrets(os.Environ())...)
			url := cmp.Or(natsURL, env("NATS_URL"), nats.DefaultURL)
			nc, err := nats.Connect(url, append(copts, nats.Name("lanefleet-mcp-bridge"), nats.MaxReconnects(-1),
				nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
					ev := log.Error().Err(err)
					if sub != nil {
						ev = ev.Str("subject", sub.Subject)
					}
					ev.Msg("NATS error") // a tool the user may not serve shows here
				}))...)
			if err != nil {
				return fmt.Errorf("cannot reach NATS: %w", err)
			}
			defer nc.Close()
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			log.Info().Int("servers", len(servers)).Str("version", version.Get().String()).Msg("mcp bridge ready")
			return runMCPBridge(ctx, nc, servers, env, log, nil)
		},
	}
	fs := c.Flags()
	fs.SortFlags = false
	fs.StringVar(&config, "config", env("LANEFLEET_MCP_CONFIG"), "the MCP servers to bridge, a JSON file in the mcpServers format (env LANEFLEET_MCP_CONFIG)")
	fs.StringVar(&natsURL, "nats-url", "", "NATS server URLs (env NATS_URL; default "+nats.DefaultURL+")")
	fs.StringVar(&creds.Creds, "creds", "", "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&creds.NKey, "nkey", "", "NATS nkey seed file (env NATS_NKEY)")
	fs.StringVar(&creds.User, "nats-user", "", "NATS user, or a token without a password (env NATS_USER; the password from NATS_PASSWORD)")
	fs.StringVar(&creds.TLSCert, "tls-cert", "", "NATS TLS client certificate file (env NATS_CERT)")
	fs.StringVar(&creds.TLSKey, "tls-key", "", "NATS TLS client key file (env NATS_KEY)")
	fs.StringVar(&creds.TLSCA, "tls-ca", "", "CA certificates of the NATS server (env NATS_CA)")
	fs.StringVar(&creds.InboxPrefix, "inbox-prefix", "", "prefix of reply subjects the bridge's permissions allow (env NATS_INBOX_PREFIX; default _INBOX_<nats-user> with a user and password)")
	fs.StringVar(&logFormat, "log-format", "auto", "log format: json, console, or auto (console on a terminal)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	return c
}
