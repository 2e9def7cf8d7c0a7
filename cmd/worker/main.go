// Command worker runs a Lanefleet fleet member.
//
// Without NATS_URL it starts an embedded JetStream nats-server (file store
// under --data-dir, clients and other workers connect on --listen); with
// NATS_URL it joins that deployment. Add capacity by starting another worker
// with the same NATS_URL.
//
//	worker [flags]
//	worker version [--json]           (also worker --version)
//	worker sanitize --provider P --api A --model M < history.json
//	worker permissions --role worker|sender|viewer|tool-server|admin --user NAME [--session KEY ...] [--tool NAME ...]
//
// -h on any command prints its help and exits 0; a wrong command line
// exits 2, a worker that fails 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/gateway/openai"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/version"
	"github.com/lanefleet/lanefleet/mcpbridge"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/sandbox"
	"github.com/lanefleet/lanefleet/tracing/otlp"
)

func main() {
	sandbox.Main() // exec's confined commands start as this binary, never for a message
	fleet.TuneGC(os.Getenv)
	// Every log line and error goes through the redactor: a NATS password
	// or an API key never reaches the terminal or a log file.
	red := redact.New()
	stderr := red.Writer(os.Stderr)
	err := runWith(red, os.Args[1:], os.Stdin, os.Stdout, stderr, os.Getenv)
	if err != nil {
		fmt.Fprintln(stderr, "worker:", err)
	}
	os.Exit(exitCode(err))
}

// Exit codes: 0 done (also -h, --version), 1 the worker failed, 2 the
// command line is wrong.
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a command line that cannot run: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.As(err, new(usageError)):
		return exitUsage
	}
	return exitFailure
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	red := redact.New()
	return runWith(red, args, stdin, stdout, red.Writer(stderr), os.Getenv)
}

// runWith runs the worker command line with the environment read through
// env; red masks stderr and learns the secrets of the configuration.
func runWith(red *redact.Redactor, args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) error {
	root := rootCommand(red, stdin, stdout, stderr, env)
	root.SetArgs(args)
	return root.Execute()
}

// rootCommand is `worker`: it runs a fleet member; its subcommands print
// things and start nothing.
func rootCommand(red *redact.Redactor, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) *cobra.Command {
	var (
		cfg fleet.Config
		f   workerFlags
	)
	root := &cobra.Command{
		Use:   "worker [flags]",
		Short: "Run a Lanefleet fleet member",
		Long: `worker runs a Lanefleet fleet member.

Without NATS_URL it starts an embedded JetStream nats-server (file store under
--data-dir; clients and other workers connect on --listen); with NATS_URL it
joins that deployment. Add capacity by starting another worker with the same
NATS_URL. Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT (or the _TRACES_ one)
is set: spans go over OTLP/HTTP.`,
		Version:       version.Get().String(),
		Args:          noArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s -h)", err, c.CommandPath())}
	})
	fs := root.Flags()
	fs.SortFlags = false
	f.defineServer(fs, &cfg, env)
	defineLanes(fs, &cfg)
	defineLimits(fs, &cfg)
	f.defineModels(fs, &cfg, env)
	f.defineTools(fs, &cfg, env)
	f.defineFleet(fs, &cfg, env)
	f.defineHTTP(fs, env)
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		fromEnv(fs, &cfg, env)
		memory, err := f.checkServer(fs, &cfg)
		if err != nil {
			return err
		}
		f.lists(&cfg)
		var mcpServers []mcpbridge.Server
		if f.mcpConfig != "" {
			if mcpServers, err = loadMCP(f.mcpConfig, env, red); err != nil {
				return err
			}
		}
		if err := f.toolRules(&cfg); err != nil {
			return err
		}
		if err := f.readFiles(&cfg); err != nil {
			return err
		}
		log, err := f.logging(stderr, memory, env)
		if err != nil {
			return err
		}
		red.Add(envSecrets(os.Environ())...)
		cfg.Redactor = red
		cfg.Logger = log
		cfg.Env = env
		aliases, err := f.governance(&cfg)
		if err != nil {
			return err
		}
		return serve(cmd.Context(), cfg, red, log, env, f.httpOpts, aliases, mcpServers)
	}
	root.AddCommand(versionCommand(stdout), sanitizeCommand(stdin, stdout, stderr), permissionsCommand(stdout), mcpBridgeCommand(red, stderr, env))
	return root
}

// serve runs the member until a signal, with tracing when the OTEL_*
// variables ask for it.
func serve(ctx context.Context, cfg fleet.Config, red *redact.Redactor, log zerolog.Logger, env func(string) string, httpOpts gateway.Options, aliases map[string]string, mcpServers []mcpbridge.Server) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	oenv, tracingOn, err := otlp.FromEnv(env)
	if err != nil {
		return usageError{err}
	}
	if tracingOn {
		red.Add(oenv.Secrets...)
		oenv.Logger = log
		exp, err := otlp.New(oenv.Config)
		if err != nil {
			return usageError{err}
		}
		tp, err := otlp.NewTracerProvider(exp, otlp.Service{Name: "lanefleet-worker", Version: version.Get().Version, Instance: cfg.WorkerID}, env)
		if err != nil {
			return usageError{err}
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				log.Warn().Err(err).Msg("tracing: the last spans were not exported")
			}
		}()
		cfg.TracerProvider = tp
		log.Info().Str("endpoint", endpointOf(oenv.URL)).Msg("tracing: exporting spans over OTLP/HTTP")
	}
	m, err := fleet.Start(ctx, cfg)
	if err != nil {
		return err
	}
	ready := log.Info()
	if cfg.ExecUnconfined {
		// Never a line an operator could skim past.
		ready = log.Warn().Str("exec", "UNCONFINED: --exec-unconfined is for tests only; commands run with this worker's privileges")
	}
	if httpOpts.Addr != "" {
		stop, err := serveHTTP(ctx, m, httpOpts, aliases, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if len(mcpServers) > 0 {
		stop, err := serveMCP(ctx, m, mcpServers, env, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	ready.Str("worker", m.Worker.ID()).Str("nats", m.ClientURL()).Str("model", m.DefaultModel()).Str("version", version.Get().String()).Msg("ready")
	return m.Run(ctx)
}

// checkHTTP refuses --http where the worker's own connection is not the
// one to serve it: a worker with a NATS identity has the worker role,
// which may not send to sessions; give the gateway a user of its own.
func checkHTTP(cfg fleet.Config, o gateway.Options) error {
	if cfg.ServerConfig != "" || cfg.User != "" || cfg.CredsFile != "" || cfg.NKeyFile != "" {
		return errors.New("--http serves through the worker's own connection, whose NATS user has the worker role and may not send to sessions: with NATS users (--server-config, --nats-user, --creds, --nkey), run bin/gateway with a user of its own instead")
	}
	return gateway.CheckListen(o.Addr, o.TokensFile != "")
}

// serveHTTP serves the HTTP gateway through the member's connection until
// ctx is done; stop waits for it.
func serveHTTP(ctx context.Context, m *fleet.Member, o gateway.Options, aliases map[string]string, log zerolog.Logger) (stop func(), err error) {
	// The gateway's own connection (in process with the embedded
	// server): its traffic does not queue behind the worker's.
	gc, err := m.SecondConn("lanefleet-gateway")
	if err != nil {
		return nil, err
	}
	cl, err := lanefleet.New(gc)
	if err != nil {
		gc.Close()
		return nil, err
	}
	glog := log.With().Str("component", "gateway").Logger()
	// The OpenAI-compatible routes list the worker's default model and
	// the aliases.
	v1 := openai.New(cl, openai.Options{Aliases: aliases, Models: []string{m.DefaultModel()}, Logger: glog})
	ln, err := gateway.Listen(o, gateway.Config{Client: cl, Logger: &glog, Routes: v1.Routes(), Tenants: m.Tenants()})
	if err != nil {
		gc.Close()
		return nil, err
	}
	log.Info().Str("url", ln.URL()).Bool("tokens", ln.Authenticates()).Msg("serving the HTTP gateway")
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer gc.Close()
		if err := ln.Serve(hctx); err != nil {
			log.Error().Err(err).Msg("HTTP gateway stopped")
		}
	}()
	return func() { cancel(); <-done }, nil
}

// serveMCP runs the MCP bridge on a connection of its own until ctx is
// done; stop waits for it.
func serveMCP(ctx context.Context, m *fleet.Member, servers []mcpbridge.Server, env func(string) string, log zerolog.Logger) (stop func(), err error) {
	nc, err := m.SecondConn("lanefleet-mcp-bridge")
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	// The worker's runs see the tools as soon as they are served, not at
	// the next discovery refresh (30 s).
	var served func(string)
	refreshed := make(chan struct{})
	if m.Tools != nil {
		due := make(chan struct{}, 1)
		served = func(string) {
			select {
			case due <- struct{}{}:
			default: // one refresh is due already: it will see these too
			}
		}
		go func() {
			defer close(refreshed)
			for {
				select {
				case <-due:
					if err := m.Tools.Refresh(bctx); err != nil {
						if bctx.Err() == nil {
							log.Warn().Err(err).Msg("remote tools: refresh after the MCP bridge served tools failed")
						}
						continue
					}
					log.Info().Int("tools", len(m.Tools.Tools())).Msg("remote tools: refreshed after the MCP bridge served tools")
				case <-bctx.Done():
					return
				}
			}
		}()
	} else {
		close(refreshed)
	}
	go func() {
		defer close(done)
		defer nc.Close()
		if err := runMCPBridge(bctx, nc, servers, env, log, served); err != nil {
			log.Error().Err(err).Msg("MCP bridge stopped")
		}
	}()
	return func() { cancel(); <-done; <-refreshed }, nil
}

// endpointOf is an export URL without credentials or query, for the log.
func endpointOf(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "?"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// noArgs refuses arguments: a worker takes flags only, and a misspelt
// subcommand must not start one.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unknown command %q for %q (see %s -h)", args[0], cmd.CommandPath(), cmd.CommandPath())}
	}
	return nil
}

// versionCommand is `worker version`: it prints the build and starts
// nothing.
func versionCommand(stdout io.Writer) *cobra.Command {
	asJSON := false
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the module version and commit of this build",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			if asJSON {
				return json.NewEncoder(stdout).Encode(version.Get())
			}
			_, err := fmt.Fprintln(stdout, version.Get())
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return c
}

// envSecrets returns the values of environment variables whose names say
// they hold a secret (…_API_KEY, …_TOKEN, …_SECRET, …_PASSWORD).
func envSecrets(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		k = strings.ToUpper(k)
		for _, suffix := range []string{"_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY"} {
			if strings.HasSuffix(k, suffix) {
				out = append(out, v)
				break
			}
		}
	}
	return out
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// logLevels are the --log-level values.
var logLevels = map[string]zerolog.Level{"debug": zerolog.DebugLevel, "info": zerolog.InfoLevel, "warn": zerolog.WarnLevel, "error": zerolog.ErrorLevel}

func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, ok := logLevels[level]
	if !ok {
		// zerolog's own parser takes numbers too, and says it defaults
		// to no level: the worker would start logging everything.
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	out := w
	switch format {
	case "json":
	case "console":
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)}
	case "auto":
		if isTerminal(w) {
			out = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
		}
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format must be json, console or auto, not %q", format)
	}
	return zerolog.New(out).Level(lvl).Hook(msTimestamp{}), nil
}

// msTimestamp stamps every line with its time to the millisecond. The
// logger's own Timestamp follows zerolog.TimeFieldFormat, a process global
// that defaults to whole seconds (the console showed .000 for every line).
type msTimestamp struct{}

// TimeFormat is the "time" field of every log line.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

func (msTimestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().Format(TimeFormat))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// clientSender is sessions_send's publisher: the Go client's Send over the
// member's connection, not following the run.
func clientSender(nc *nats.Conn) (fleet.SendFunc, error) {
	c, err := lanefleet.New(nc)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, key, text, id string) (string, error) {
		run, err := c.Send(ctx, key, text, lanefleet.WithMessageID(id), lanefleet.WithoutFollow())
		if err != nil {
			return "", err
		}
		return run.ID, nil
	}, nil
}

// dataDir is the worker's data directory: the one given; else, for the
// embedded server without a configuration file, ./lanefleet-data. A worker
// joining another server (which may not give --data-dir) has none: it
// keeps its workspaces in the system's temporary directory and its agent
// cache in one of its own unless --workspace-root and --agent-cache-dir
// say where, never in whatever directory it was started from (/ under a
// service manager, the source tree in a test).
func dataDir(given, natsURL, serverConfig string) string {
	if given != "" || natsURL != "" || serverConfig != "" {
		return given
	}
	return "./lanefleet-data"
}
