// Command gateway is Lanefleet's HTTP front door: a stateless server that
// joins the fleet with the usual NATS credentials and serves the native
// session API (JSON and resumable server-sent events) and the
// OpenAI-compatible routes. Start as many as you like behind a balancer:
// none knows anything the others do not.
//
//	gateway [--http 127.0.0.1:8080] [--tokens FILE] [--tls-cert F --tls-key F] [--model-alias NAME=REF ...] [--model REF ...]
//	gateway token new --name NAME --role sender|viewer|admin [--prefix P ...]
//	gateway version
//
// -h on any command prints its help and exits 0; a wrong command line
// exits 2, a gateway that fails 1.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/openai"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
	}
	os.Exit(exitCode(err))
}

// usageError is a command line that cannot run: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.As(err, new(usageError)):
		return 2
	}
	return 1
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) error {
	root := rootCommand(stdout, stderr, env)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

func rootCommand(stdout, stderr io.Writer, env func(string) string) *cobra.Command {
	var f gatewayFlags
	root := &cobra.Command{
		Use:   "gateway [flags]",
		Short: "Serve Lanefleet's HTTP API in front of a fleet",
		Long: `gateway serves Lanefleet's HTTP API: the native session API at /api (JSON and
server-sent events that resume with Last-Event-ID) and the OpenAI-compatible
routes at /v1, with /healthz, /readyz, /metrics and /openapi.json. It keeps no
state: run as many as you like.

NATS is reached at --nats-url (env NATS_URL) with the publisher's credential
flags and variables. Without --tokens the gateway serves loopback clients
only, unauthenticated, and refuses a non-loopback --http address.`,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s -h)", err, c.CommandPath())}
	})
	fs := root.Flags()
	fs.SortFlags = false
	f.register(fs, env)
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		return f.serve(cmd.Context(), stderr, env)
	}
	root.AddCommand(tokenCommand(stdout), &cobra.Command{
		Use:   "version",
		Short: "Print the module version and commit of this build",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(stdout, version.Get())
			return err
		},
	})
	return root
}

// gatewayFlags are the gateway's flags.
type gatewayFlags struct {
	opts    gateway.Options
	natsURL string
	creds   lanefleet.Credentials
	level   string
	aliases []string
	models  []string
	tenants governance.TenantRule
}

// register declares the flags on fs, the HTTP ones first.
func (f *gatewayFlags) register(fs *pflag.FlagSet, env func(string) string) {
	registerHTTP(fs, &f.opts, env)
	fs.StringVar(&f.natsURL, "nats-url", "", "NATS server URLs (env NATS_URL; default "+nats.DefaultURL+")")
	fs.StringVar(&f.creds.Creds, "creds", "", "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&f.creds.NKey, "nkey", "", "NATS nkey seed file (env NATS_NKEY)")
	fs.StringVar(&f.creds.User, "user", "", "NATS user, or a token without --password (env NATS_USER)")
	fs.StringVar(&f.creds.TLSCert, "tlscert", "", "NATS TLS client certificate file (env NATS_CERT)")
	fs.StringVar(&f.creds.TLSKey, "tlskey", "", "NATS TLS client key file (env NATS_KEY)")
	fs.StringVar(&f.creds.TLSCA, "tlsca", "", "CA certificates of the NATS server (env NATS_CA)")
	fs.StringVar(&f.creds.InboxPrefix, "inbox-prefix", "", "prefix of reply subjects, e.g. _INBOX_gateway (env NATS_INBOX_PREFIX)")
	fs.StringVar(&f.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringArrayVar(&f.aliases, "model-alias", nil, "NAME=REF: a model name the OpenAI-compatible routes take for the fleet model REF (NAME= the fleet's default model); repeatable")
	fs.StringVar(&f.tenants.Separator, "tenant-separator", "", `the fleet's --tenant-separator (default ":"): a caller whose token prefix is a whole tenant prefix ("acme:") reads that tenant's budgets`)
	fs.StringSliceVar(&f.models, "model", nil, "fleet model refs GET /v1/models lists besides the aliases; repeatable or comma-separated")
}

// serve checks the flags, connects to NATS and serves the HTTP API until
// ctx is done.
func (f *gatewayFlags) serve(ctx context.Context, stderr io.Writer, env func(string) string) error {
	lvl, err := zerolog.ParseLevel(f.level)
	if err != nil || f.level == "" {
		return usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", f.level)}
	}
	log := zerolog.New(stderr).Level(lvl).With().Timestamp().Logger()
	// Refused before anything connects: no token file, no public
	// address.
	if err := gateway.CheckListen(f.opts.Addr, f.opts.TokensFile != ""); err != nil {
		return usageError{err}
	}
	alias, err := openai.ParseAliases(f.aliases)
	if err != nil {
		return usageError{err}
	}
	copts, err := f.creds.Or(lanefleet.CredentialsFromEnv(env)).Options()
	if err != nil {
		return usageError{err}
	}
	quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	url := cmp.Or(f.natsURL, env("NATS_URL"), nats.DefaultURL)
	cl, err := lanefleet.Connect(url, append(copts, nats.MaxReconnects(-1), quiet)...)
	if err != nil {
		return fmt.Errorf("cannot reach NATS at %s: %w", url, err)
	}
	defer cl.Close()
	v1 := openai.New(cl, openai.Options{Aliases: alias, Models: f.models, Logger: log})
	ln, err := gateway.Listen(f.opts, gateway.Config{Client: cl, Logger: &log, Routes: v1.Routes(), Tenants: f.tenants})
	if err != nil {
		return usageError{err}
	}
	log.Info().Str("url", ln.URL()).Bool("tokens", ln.Authenticates()).Str("version", version.Get().String()).Msg("gateway ready")
	return ln.Serve(ctx)
}

// registerHTTP adds the gateway's own flags.
func registerHTTP(fs *pflag.FlagSet, o *gateway.Options, env func(string) string) {
	fs.StringVar(&o.Addr, "http", cmp.Or(env("LANEFLEET_HTTP"), "127.0.0.1:8080"), "address to serve HTTP on (env LANEFLEET_HTTP); a non-loopback one needs --tokens")
	fs.StringVar(&o.TokensFile, "tokens", env("LANEFLEET_HTTP_TOKENS"), "token file (JSON; env LANEFLEET_HTTP_TOKENS): bearer tokens stored hashed, each with a role and the sessions it reaches (gateway token new makes one)")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM)")
	fs.StringVar(&o.TLSKey, "tls-key", "", "the certificate's private key (PEM)")
	fs.StringVar(&o.CORSOrigins, "cors-origins", "", "comma-separated origins browsers may call from (* = any); default none: CORS off")
}

// tokenCommand is `gateway token new`.
func tokenCommand(stdout io.Writer) *cobra.Command {
	tok := &cobra.Command{Use: "token", Short: "Make tokens for the token file", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return usageError{fmt.Errorf("missing command (see %s -h)", c.CommandPath())}
		}}
	var e gateway.TokenEntry
	var role string
	nw := &cobra.Command{
		Use:   "new --name NAME --role sender|viewer|admin [--prefix P ...] [--session KEY ...]",
		Short: "Print a fresh token and its token-file entry",
		Long: `new prints a fresh random token on its first line (give it to the caller; it is
not stored anywhere) and, on the second, the entry to add to the token file's
"tokens" list, which holds only the token's SHA-256.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			e.Role = auth.Role(role)
			token, hash := gateway.NewToken()
			e.Hash = hash
			line, err := json.Marshal(e)
			if err != nil {
				return err
			}
			// The entry must load as the file would load it.
			if _, err := gateway.ParseTokens(strings.NewReader(`{"tokens":[` + string(line) + `]}`)); err != nil {
				return usageError{err}
			}
			_, err = fmt.Fprintf(stdout, "%s\n%s\n", token, line)
			return err
		},
	}
	f := nw.Flags()
	f.StringVar(&e.Name, "name", "", "the token's name, in logs and metrics")
	f.StringVar(&role, "role", "sender", "sender, viewer or admin")
	f.StringSliceVar(&e.Prefixes, "prefix", nil, `session-key prefix the token reaches (repeatable; "" reaches every session)`)
	f.StringSliceVar(&e.Sessions, "session", nil, "single session key the token reaches (repeatable)")
	f.StringSliceVar(&e.Models, "model", nil, "model the token may name (repeatable; default any)")
	f.IntVar(&e.Rate, "rate", 0, "requests per minute on one gateway (0 = no limit)")
	f.IntVar(&e.Burst, "burst", 0, "requests at once above the rate (default a tenth of it)")
	f.IntVar(&e.Concurrency, "concurrency", 0, "requests and streams in flight at once on one gateway (0 = no limit)")
	tok.AddCommand(nw)
	return tok
}
