// Command publisher sends messages to Lanefleet sessions, follows their
// replies live, and lets operators see and steer the fleet.
//
//	publisher send --session KEY [--json] [--no-follow] [--mode M] [--model P/ID] [--thinking L] [--auth-profile ID] [--image FILE]
//	               [--tool-file FILE] [--tool-result ID=TEXT] [--tool-error ID=TEXT] TEXT|-
//	publisher follow --session KEY --run ID [--json]
//	publisher settings --session KEY [--mode M] [--debounce D] [--cap N] [--drop old|new|summarize] [--model P/ID]
//	               [--thinking L] [--auth-profile ID] [--history-limit N] [--max-tool-iterations N]
//	               [--allow-tools A,B] [--deny-tools C] [--approve-tools D] [--reset]
//	publisher history --session KEY [--json]
//	publisher import --session KEY FILE.jsonl
//	publisher mcp (an MCP server on stdin and stdout: send_message, get_run, read_history, list_sessions)
//	publisher stop --session KEY [--no-follow]
//	publisher runs | sessions [forget KEY] | backlog --session KEY | dlq list|show|replay|purge | auth status|reset
//	publisher version (also --version)
//
// send and follow show the run live: the reply on stdout, and on stderr the
// reasoning, tool calls and results, compaction, restarts and errors
// (colored on a terminal, plain text otherwise); --json prints the raw
// events, one per line. A run that stops for client tools lists the calls
// to answer with --tool-result ID=TEXT, and one that waits for approval of
// a worker tool's call lists those to answer with --tool-result ID=approve
// (or ID=deny).
//
// NATS is reached at --nats-url (env NATS_URL, default nats://127.0.0.1:4222)
// with the nats CLI's credentials: --creds, --nkey, --user/--password,
// --tlscert/--tlskey/--tlsca and --inbox-prefix, or NATS_CREDS, NATS_NKEY,
// NATS_USER, NATS_PASSWORD, NATS_CERT, NATS_KEY, NATS_CA, NATS_INBOX_PREFIX.
// A sender's user needs only its sessions' subjects (see the roles in docs/security.md).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/version"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/schedule"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, errReported) {
		fmt.Fprintln(os.Stderr, "publisher:", err)
	}
	os.Exit(exitCode(err))
}

// errReported is a failure already explained on stderr.
var errReported = errors.New("reported")

// Exit codes: 0 done (also -h, --version), 1 the command failed (a run
// that ended in error, an unreachable server), 2 the command line is wrong.
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a command line that cannot run: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// readImage reads the image file an --image flag of command names, and
// its media type from the file's extension (a usage error when that is no
// image type).
func readImage(command, path string) (mediaType string, data []byte, err error) {
	mt := mime.TypeByExtension(strings.ToLower(filepath.Ext(path)))
	if !strings.HasPrefix(mt, "image/") {
		return "", nil, usagef("%s: --image %s: not an image file type (%q)", command, path, mt)
	}
	if data, err = os.ReadFile(path); err != nil {
		return "", nil, fmt.Errorf("%s: --image: %w", command, err)
	}
	return mt, data, nil
}

func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.As(err, new(usageError)):
		return exitUsage
	}
	return exitFailure
}

// common holds what every command connects with, and the session and
// output options of the commands that take them.
type common struct {
	url     string
	creds   lanefleet.Credentials
	session string
	asJSON  bool
	timeout time.Duration
	getenv  func(string) string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

// register adds the connection flags every command takes.
func (c *common) register(fs *pflag.FlagSet) {
	// Defaults come from the environment after parsing, so -h never prints
	// a secret.
	fs.StringVar(&c.url, "nats-url", "", "NATS server URL (env NATS_URL; default "+nats.DefaultURL+")")
	fs.StringVar(&c.creds.Creds, "creds", "", "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&c.creds.NKey, "nkey", "", "NATS nkey seed file (env NATS_NKEY)")
	fs.StringVar(&c.creds.User, "user", "", "NATS user, or a token without --password (env NATS_USER)")
	fs.StringVar(&c.creds.Password, "password", "", "NATS password (env NATS_PASSWORD)")
	fs.StringVar(&c.creds.TLSCert, "tlscert", "", "TLS client certificate file (env NATS_CERT)")
	fs.StringVar(&c.creds.TLSKey, "tlskey", "", "TLS client key file (env NATS_KEY)")
	fs.StringVar(&c.creds.TLSCA, "tlsca", "", "CA certificates of the server (env NATS_CA)")
	fs.StringVar(&c.creds.InboxPrefix, "inbox-prefix", "", "prefix of reply subjects, e.g. _INBOX_alice (env NATS_INBOX_PREFIX)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up after this long")
}

// sessionFlag adds --session to a command that acts on one session.
func (c *common) sessionFlag(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.session, "session", "", "session key (any UTF-8 string up to 256 bytes)")
}

// jsonFlag adds --json.
func (c *common) jsonFlag(cmd *cobra.Command, help string) {
	cmd.Flags().BoolVar(&c.asJSON, "json", false, help)
}

// open connects and bounds the command by --timeout; done releases both.
func (c *common) open(ctx context.Context) (*lanefleet.Client, context.Context, func(), error) {
	url := cmp.Or(c.url, c.getenv("NATS_URL"), nats.DefaultURL)
	opts, err := c.creds.Or(lanefleet.CredentialsFromEnv(c.getenv)).Options()
	if err != nil {
		return nil, nil, nil, err
	}
	// The server's asynchronous errors reach the command as its own
	// errors (a permission violation is ErrPermission, with what was
	// refused): nats.go's default handler printed each once more.
	quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	cl, err := lanefleet.Connect(url, append(opts, nats.Timeout(3*time.Second), quiet)...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return nil, nil, nil, fmt.Errorf("NATS refused the credentials (--creds, --nkey, --user/--password, --tlscert or NATS_*): %w", err)
		}
		return nil, nil, nil, fmt.Errorf("cannot reach NATS (is a worker running? set --nats-url or NATS_URL): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}

// checkSession says what is wrong with --session before touching the network.
func (c *common) checkSession(cmd string) error {
	if c.session == "" {
		return usagef("%s: --session is required", cmd)
	}
	if err := events.ValidateKey(c.session); err != nil {
		return usagef("%s: --session: %w", cmd, err)
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runIO(ctx, args, os.Stdin, stdout, stderr, os.Getenv)
}

// runEnv is run with the environment read through getenv.
func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	return runIO(ctx, args, os.Stdin, stdout, stderr, getenv)
}

// runIO runs the command line with its standard streams and environment.
func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	c := &common{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	root := rootCommand(c)
	root.SetArgs(args)
	if len(args) == 0 {
		_ = root.Usage()
		return usagef("missing command")
	}
	return root.ExecuteContext(ctx)
}

// rootCommand is the command tree: the session commands, then the
// operators' (sessions, backlog, dlq, auth).
func rootCommand(c *common) *cobra.Command {
	root := &cobra.Command{
		Use:   "publisher",
		Short: "Send messages to Lanefleet sessions, follow their replies, and operate the fleet",
		Long: `publisher sends messages to Lanefleet sessions and follows their replies live,
and lets operators see and steer the fleet.

send and follow show the run live: the reply on stdout, and on stderr the
reasoning, tool calls and results, compaction, restarts and errors (colored on
a terminal, plain text otherwise); --json prints the raw events, one per line.
A run that stops for client tools lists the calls to answer with --tool-result
ID=TEXT; one that waits for approval of a worker tool's call lists those to
answer with --tool-result ID=approve (or ID=deny).

NATS is reached at --nats-url (env NATS_URL, default nats://127.0.0.1:4222) with
the nats CLI's credentials: --creds, --nkey, --user/--password,
--tlscert/--tlskey/--tlsca and --inbox-prefix, or NATS_CREDS, NATS_NKEY,
NATS_USER, NATS_PASSWORD, NATS_CERT, NATS_KEY, NATS_CA, NATS_INBOX_PREFIX. A
sender's user needs only its sessions' subjects; sessions, dlq and auth need
the admin role (see the roles in docs/security.md).

Exit codes: 0 done, 1 failed (a run that ended in error, no server), 2 a wrong
command line.`,
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("missing command (see %s -h)", cmd.CommandPath())
		},
	}
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s -h)", err, cmd.CommandPath())}
	})
	c.register(root.PersistentFlags())
	root.AddGroup(&cobra.Group{ID: "session", Title: "Sessions:"}, &cobra.Group{ID: "ops", Title: "Operating the fleet:"})
	for _, cmd := range []*cobra.Command{sendCommand(c), followCommand(c), stopCommand(c), settingsCommand(c), historyCommand(c), importCommand(c), mcpCommand(c)} {
		cmd.GroupID = "session"
		root.AddCommand(cmd)
	}
	for _, cmd := range []*cobra.Command{runsCommand(c), sessionsCommand(c), backlogCommand(c), dlqCommand(c), authCommand(c), budgetCommand(c), quotaCommand(c), scheduleCommand(c), agentsCommand(c)} {
		cmd.GroupID = "ops"
		root.AddCommand(cmd)
	}
	root.AddCommand(versionCommand(c))
	return root
}

// noArgs refuses arguments to a command that takes none.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usagef("unknown command %q for %q (see %s -h)", args[0], cmd.CommandPath(), cmd.CommandPath())
		}
		return usagef("%s: unexpected argument %q", cmd.CommandPath(), args[0])
	}
	return nil
}

func versionCommand(c *common) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and commit of this build",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(c.stdout, version.Get())
			return err
		},
	}
}

// sendFlags are send's message flags.
type sendFlags struct {
	noFollow, heartbeat   bool
	mode, model, thinking string
	msgID, authProfile    string
	images, tools         []string
	results, failures     []string
}

func sendCommand(c *common) *cobra.Command {
	var f sendFlags
	cmd := &cobra.Command{
		Use:   "send --session KEY [flags] TEXT|-",
		Short: "Send a message and follow its reply (TEXT - reads the message from stdin)",
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := messageText(args, c.stdin)
			if err != nil {
				return err
			}
			if err := c.checkSession("send"); err != nil {
				return err
			}
			opts, err := f.options(text, c.asJSON)
			if err != nil {
				return err
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			r, err := cl.Send(ctx, c.session, text, opts...)
			if errors.Is(err, lanefleet.ErrLaneFull) {
				return fmt.Errorf("%w (publisher backlog --session %s shows them)", err, shellQuote(c.session))
			}
			if err != nil {
				return err
			}
			if f.noFollow {
				if c.asJSON {
					return json.NewEncoder(c.stdout).Encode(map[string]any{"session": r.Session, "run": r.ID})
				}
				fmt.Fprintf(c.stdout, "sent: session %s run %s\n", r.Session, r.ID)
				return nil
			}
			return follow(ctx, r, c.asJSON, c.stdout, c.stderr)
		},
	}
	c.sessionFlag(cmd)
	c.jsonFlag(cmd, "print the run's events, one JSON object per line")
	fs := cmd.Flags()
	fs.BoolVar(&f.noFollow, "no-follow", false, "publish and print the run id without following the reply")
	fs.BoolVar(&f.heartbeat, "heartbeat", false, "send a heartbeat: it runs if the session is idle and is dropped if it is busy")
	fs.StringVar(&f.mode, "mode", "", "queue mode: followup, collect, steer, steer-backlog, interrupt, reject, rollback")
	fs.StringVar(&f.model, "model", "", "model provider/model-id")
	fs.StringVar(&f.thinking, "thinking", "", "thinking level: off, minimal, low, medium, high, xhigh")
	fs.StringVar(&f.authProfile, "auth-profile", "", "run this turn on this auth profile only")
	fs.StringVar(&f.msgID, "id", "", "message id for de-duplication on the session's lane: the same id sent again within 2 minutes is not run again (default random)")
	fs.StringArrayVar(&f.images, "image", nil, "attach an image file (repeatable)")
	fs.StringArrayVar(&f.tools, "tool-file", nil, "offer the client tools defined in a JSON file (repeatable): an array of {name, description, parameters}")
	fs.StringArrayVar(&f.results, "tool-result", nil, "answer a pending tool call: ID=TEXT, or ID=@FILE (repeatable)")
	fs.StringArrayVar(&f.failures, "tool-error", nil, "answer a pending tool call with an error: ID=TEXT (repeatable)")
	return cmd
}

// options are the send options of the message text and the flags, checked
// before the network is touched: a message the fleet would refuse is a
// usage error here.
func (f *sendFlags) options(text string, asJSON bool) ([]lanefleet.SendOption, error) {
	opts := []lanefleet.SendOption{lanefleet.WithMode(f.mode), lanefleet.WithModel(f.model), lanefleet.WithThinking(f.thinking), lanefleet.WithMessageID(f.msgID),
		lanefleet.WithAuthProfile(f.authProfile)}
	if asJSON {
		opts = append(opts, lanefleet.WithJSON())
	}
	if f.heartbeat {
		opts = append(opts, lanefleet.WithHeartbeat())
	}
	for _, path := range f.images {
		mt, data, err := readImage("send", path)
		if err != nil {
			return nil, err
		}
		opts = append(opts, lanefleet.WithImage(mt, data))
	}
	var toolDefs []events.ClientTool
	for _, path := range f.tools {
		defs, err := readTools(path)
		if err != nil {
			return nil, fmt.Errorf("send: --tool-file: %w", err)
		}
		toolDefs = append(toolDefs, defs...)
	}
	answers, err := toolResults(f.results, f.failures)
	if err != nil {
		return nil, usagef("send: %w", err)
	}
	if len(toolDefs) > 0 {
		opts = append(opts, lanefleet.WithTools(toolDefs...))
	}
	if len(answers) > 0 {
		opts = append(opts, lanefleet.WithToolResults(answers...))
	}
	// Say what is wrong with the message before touching the network.
	check := events.Inbound{Text: text, Mode: f.mode, Model: f.model, Thinking: f.thinking, AuthProfile: f.authProfile, Tools: toolDefs, ToolResults: answers}
	if len(f.images) > 0 {
		check.Images = []events.Image{{MimeType: "image/png", Data: "AA=="}}
	}
	if err := check.Validate(); err != nil {
		return nil, usagef("send: %w", err)
	}
	return opts, nil
}

// messageText is send's text: its arguments joined by spaces, or stdin
// when the one argument is "-" (at most events.MaxTextBytes).
func messageText(args []string, stdin io.Reader) (string, error) {
	if len(args) != 1 || args[0] != "-" {
		return strings.Join(args, " "), nil
	}
	if stdin == nil {
		return "", usagef("send -: no standard input")
	}
	b, err := io.ReadAll(io.LimitReader(stdin, events.MaxTextBytes+1))
	if err != nil {
		return "", fmt.Errorf("send -: reading stdin: %w", err)
	}
	if len(b) > events.MaxTextBytes {
		return "", usagef("send -: the message on stdin is longer than %d bytes", events.MaxTextBytes)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

func followCommand(c *common) *cobra.Command {
	var runID string
	cmd := &cobra.Command{
		Use:   "follow --session KEY --run ID",
		Short: "Follow a run's events to its end",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runID == "" {
				return usagef("follow: --run is required")
			}
			if err := c.checkSession("follow"); err != nil {
				return err
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			return follow(ctx, cl.Run(c.session, runID), c.asJSON, c.stdout, c.stderr)
		},
	}
	c.sessionFlag(cmd)
	c.jsonFlag(cmd, "print the run's events, one JSON object per line")
	cmd.Flags().StringVar(&runID, "run", "", "run id (printed by send --no-follow)")
	return cmd
}

func historyCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history --session KEY",
		Short: "Print a session's transcript (--json: a pi session JSONL file)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.checkSession("history"); err != nil {
				return err
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if c.asJSON {
				return cl.Export(ctx, c.session, c.stdout)
			}
			entries, err := cl.History(ctx, c.session)
			if err != nil {
				return err
			}
			return printHistory(entries, c.stdout)
		},
	}
	c.sessionFlag(cmd)
	c.jsonFlag(cmd, "print a pi session JSONL file")
	return cmd
}

func importCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import --session KEY FILE.jsonl",
		Short: "Import a pi/OpenClaw session file into a new session",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("import: usage: publisher import --session KEY FILE.jsonl")
			}
			if err := c.checkSession("import"); err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("import: %w", err)
			}
			defer f.Close()
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if err := cl.Import(ctx, c.session, f); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "imported %s into session %s\n", args[0], c.session)
			return nil
		},
	}
	c.sessionFlag(cmd)
	return cmd
}

func runsCommand(c *common) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List the runs the workers are running now (the admin role)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			list, err := cl.ActiveRuns(ctx)
			if errors.Is(err, lanefleet.ErrPermission) {
				return errors.New("runs: this NATS user may not list the fleet's runs (that takes the admin role: read access to the runs bucket); a sender sees its own runs with send and follow")
			}
			if err != nil {
				return err
			}
			// The schedules, when this user may read them, mark the runs
			// they fired and the sessions they send to.
			var sched runSchedules
			if scs, _, err := cl.Schedules(ctx); err == nil {
				sched = schedulesOf(scs)
			}
			return printRuns(list, sched, c.asJSON, time.Now(), c.stdout)
		},
	}
	c.jsonFlag(cmd, "print one JSON object per run")
	return cmd
}

// follow shows a run's events until its final event (raw JSON lines with
// asJSON). A message merged into another run is followed into that run.
func follow(ctx context.Context, r *lanefleet.Run, asJSON bool, stdout, stderr io.Writer) error {
	return followWith(ctx, r, asJSON, newView(stdout, stderr, r.Session), json.NewEncoder(stdout))
}

func followWith(ctx context.Context, r *lanefleet.Run, asJSON bool, v *view, enc *json.Encoder) error {
	waiting := lanefleet.RunState("")
	r.OnWait(waitNoteAfter, func(w lanefleet.Wait) {
		switch w.State {
		case lanefleet.RunNoWorker, lanefleet.RunQueued, lanefleet.RunHandOver:
			waiting = w.State
		}
		v.wait(r.ID, w)
	})
	for ev, err := range r.Events(ctx) {
		if err != nil {
			var de *events.DecodeError
			switch {
			case errors.As(err, &de):
				v.note("%s", v.style(red, "skipped a message that is not an event: "+err.Error()))
				continue
			case errors.Is(err, context.DeadlineExceeded) && waiting == lanefleet.RunNoWorker:
				return fmt.Errorf("run %s: no worker ran it before --timeout (it stays stored; follow it later with: publisher follow --session %s --run %s)", r.ID, shellQuote(r.Session), r.ID)
			case errors.Is(err, context.DeadlineExceeded):
				return fmt.Errorf("run %s: no final event before --timeout", r.ID)
			}
			return err
		}
		if asJSON {
			if err := enc.Encode(ev); err != nil {
				return err
			}
		} else if !ev.Terminal() {
			v.event(ev)
		}
		if !ev.Terminal() {
			continue
		}
		res := ev.Data.Result
		if res == nil {
			res = &events.Result{}
		}
		if into := res.Meta.MergedInto; into != "" && into != r.ID {
			if !asJSON {
				v.note("%s", v.style(dim, "↪ answered by run "+into+" (collected or steered with other messages)"))
			}
			return followWith(ctx, r.Follow(into), asJSON, v, enc)
		}
		if asJSON {
			if e := res.Meta.Error; e != nil {
				return fmt.Errorf("run ended in error (%s): %s", e.Kind, e.Message)
			}
			return nil
		}
		return v.final(res)
	}
	return fmt.Errorf("run %s: event stream ended without a final event", r.ID)
}

// waitNoteAfter is how long following shows nothing before it says what it
// waits for.
const waitNoteAfter = 2 * time.Second

// readTools reads client tool definitions: a JSON array of {name,
// description, parameters}, an object {"tools": [...]}, or OpenAI-style
// [{"type": "function", "function": {...}}].
func readTools(path string) ([]events.ClientTool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		var wrapped struct {
			Tools []json.RawMessage `json:"tools"`
		}
		if err2 := json.Unmarshal(data, &wrapped); err2 != nil || wrapped.Tools == nil {
			return nil, fmt.Errorf("%s: want a JSON array of tools or {\"tools\": [...]}: %v", path, err)
		}
		raw = wrapped.Tools
	}
	out := make([]events.ClientTool, 0, len(raw))
	for i, r := range raw {
		var t struct {
			events.ClientTool
			Type     string             `json:"type"`
			Function *events.ClientTool `json:"function"`
		}
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, fmt.Errorf("%s: tool %d: %v", path, i, err)
		}
		tool := t.ClientTool
		if t.Function != nil {
			tool = *t.Function
		}
		if tool.Name == "" {
			return nil, fmt.Errorf("%s: tool %d has no name", path, i)
		}
		out = append(out, tool)
	}
	return out, nil
}

// toolResults parses --tool-result ID=TEXT (ID=@FILE reads the file) and
// --tool-error ID=TEXT.
func toolResults(results, failures []string) ([]events.ToolResult, error) {
	var out []events.ToolResult
	for i, list := range [][]string{results, failures} {
		flag := "--tool-result"
		if i == 1 {
			flag = "--tool-error"
		}
		for _, v := range list {
			id, text, ok := strings.Cut(v, "=")
			if !ok || id == "" {
				return nil, fmt.Errorf("%s %q: want ID=TEXT", flag, v)
			}
			if path, ok := strings.CutPrefix(text, "@"); ok && i == 0 {
				data, err := os.ReadFile(path)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", flag, id, err)
				}
				text = string(data)
			}
			out = append(out, events.ToolResult{ToolCallID: id, Text: text, IsError: i == 1})
		}
	}
	return out, nil
}

// stopCommand ends a session's running turn without a new prompt.
func stopCommand(c *common) *cobra.Command {
	var noFollow bool
	cmd := &cobra.Command{
		Use:   "stop --session KEY [--no-follow]",
		Short: "End the session's running turn (the messages queued before the stop are dropped)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.checkSession("stop"); err != nil {
				return err
			}
			cl, ctx, done, err := c.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			r, err := cl.Stop(ctx, c.session)
			if err != nil {
				return err
			}
			if noFollow {
				fmt.Fprintf(c.stdout, "sent: session %s run %s\n", r.Session, r.ID)
				return nil
			}
			return follow(ctx, r, c.asJSON, c.stdout, c.stderr)
		},
	}
	c.sessionFlag(cmd)
	c.jsonFlag(cmd, "print the stop's events as JSON lines")
	cmd.Flags().BoolVar(&noFollow, "no-follow", false, "do not wait until a worker has stopped the turn")
	return cmd
}

// settings prints or changes a session's stored queue and run settings.
func settingsCommand(c *common) *cobra.Command {
	var (
		mode, debounce, drop string
		capN                 int
		reset, noFollow      bool
		run                  events.RunSettings
		allow, deny, approve string
	)
	cmd := &cobra.Command{
		Use: "settings --session KEY [--mode M] [--debounce D] [--cap N] [--drop old|new|summarize] [--model P/ID] [--thinking L]\n" +
			"                  [--auth-profile ID] [--history-limit N] [--max-tool-iterations N] [--allow-tools A,B] [--deny-tools C] [--approve-tools D] [--reset]",
		Short: "Print a session's settings and state (sticky auth profile, running usage), or change its settings",
		Long: `Print a session's stored settings and state, or change them.

Queue settings decide what happens to messages that name no mode; run settings
apply to every later turn whose message names none: model, thinking level, auth
profile (pins the session to it), history limit, tool-loop limit, and a tool
policy that narrows the worker's. The tool flags replace the stored tool policy
as a whole (--allow-tools "" with the others unset clears it). A change travels
through the session's lane: it applies exactly between the messages sent before
and after it. Given no change, the command prints what is stored, what is in
force, the auth profile the next turn starts on and the session's running usage.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fs := cmd.Flags()
			if fs.Changed("allow-tools") || fs.Changed("deny-tools") || fs.Changed("approve-tools") {
				run.Tools = &events.ToolPolicy{Allow: splitList(allow), Deny: splitList(deny), Approve: splitList(approve)}
			}
			return settings(cmd.Context(), c, settingsArgs{mode: mode, debounce: debounce, drop: drop, capN: capN, reset: reset, noFollow: noFollow, run: run})
		},
	}
	c.sessionFlag(cmd)
	c.jsonFlag(cmd, "print JSON")
	fs := cmd.Flags()
	fs.StringVar(&mode, "mode", "", "mode of messages that name none: followup, collect, steer, steer-backlog, interrupt, reject, rollback")
	fs.StringVar(&debounce, "debounce", "", "collect: quiet time before a queued batch runs (1s, 500ms, or milliseconds)")
	fs.IntVar(&capN, "cap", 0, "collect: most messages merged into one turn")
	fs.StringVar(&drop, "drop", "", "collect, over the cap: old, new or summarize")
	fs.StringVar(&run.Model, "model", "", "model of turns whose message names none (provider/model-id; the fleet must allow it)")
	fs.StringVar(&run.Thinking, "thinking", "", "thinking level of turns whose message names none: off, minimal, low, medium, high, xhigh")
	fs.StringVar(&run.AuthProfile, "auth-profile", "", "pin the session's turns to this auth profile")
	fs.IntVar(&run.HistoryLimit, "history-limit", 0, "user turns of history kept in requests")
	fs.IntVar(&run.MaxToolIterations, "max-tool-iterations", 0, "model calls of a turn's tool loop (within the worker's limit)")
	fs.IntVar(&run.MaxToolRepeats, "max-tool-repeats", 0, "stop a turn once the same tool call failed the same way this many times (within the worker's limit)")
	fs.StringVar(&allow, "allow-tools", "", "comma-separated tool name patterns the session may use (within the worker's policy)")
	fs.StringVar(&deny, "deny-tools", "", "comma-separated tool name patterns the session may not use")
	fs.StringVar(&approve, "approve-tools", "", "comma-separated tool name patterns whose every call waits for the client's approve")
	fs.BoolVar(&reset, "reset", false, "clear the stored queue and run settings first")
	fs.BoolVar(&noFollow, "no-follow", false, "do not wait until a worker has applied the change")
	return cmd
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// settingsArgs are the settings command's flags.
type settingsArgs struct {
	mode, debounce, drop string
	capN                 int
	reset, noFollow      bool
	run                  events.RunSettings
}

func settings(ctx context.Context, c *common, a settingsArgs) error {
	stdout, stderr := c.stdout, c.stderr
	if err := c.checkSession("settings"); err != nil {
		return err
	}
	q := events.QueueSettings{Mode: a.mode, Cap: a.capN, Drop: a.drop}
	if a.debounce != "" {
		d, err := time.ParseDuration(a.debounce)
		if err != nil {
			ms, perr := strconv.ParseInt(a.debounce, 10, 64)
			if perr != nil {
				return usagef("settings: --debounce %q: want a duration (1s, 500ms) or milliseconds", a.debounce)
			}
			d = time.Duration(ms) * time.Millisecond
		}
		ms := d.Milliseconds()
		q.DebounceMs = &ms
	}
	if err := q.Validate(); err != nil {
		return usagef("settings: %w", err)
	}
	if err := a.run.Validate(); err != nil {
		return usagef("settings: %w", err)
	}
	queueChange, runChange := q != (events.QueueSettings{}), a.run != (events.RunSettings{})
	cl, ctx, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	if !queueChange && !runChange && !a.reset {
		s, err := cl.Settings(ctx, c.session)
		if err != nil {
			return err
		}
		return printSettings(c.session, s, c.asJSON, stdout)
	}
	// A reset and the values set travel in one message.
	ch := lanefleet.SettingsChange{Reset: a.reset}
	if queueChange {
		o := lanefleet.QueueSettingsFromWire(&q)
		ch.Queue = &o
	}
	if runChange {
		ch.Run = &a.run
	}
	r, err := cl.SetSettings(ctx, c.session, ch)
	if err != nil {
		return err
	}
	if a.noFollow {
		fmt.Fprintf(stdout, "sent: session %s run %s (applies to messages sent after it)\n", r.Session, r.ID)
		return nil
	}
	return follow(ctx, r, c.asJSON, stdout, stderr)
}

// printSettings prints a session's stored settings, what is in force, and
// its state.
func printSettings(session string, s lanefleet.SessionSettings, asJSON bool, w io.Writer) error {
	stored := s.Queue.Wire()
	eff := queue.Resolve(s.Queue.Overrides())
	if s.Queue.Mode == "" {
		eff.Mode = queue.ModeFollowup // the fleet's default for messages without a mode
	}
	if asJSON {
		out := map[string]any{"session": session, "stored": stored, "run": s.Run, "state": s.State,
			"effective": map[string]any{"mode": eff.Mode, "debounceMs": eff.Debounce.Milliseconds(), "cap": eff.Cap, "drop": eff.Drop}}
		if s.Unreadable != "" {
			out["unreadable"] = s.Unreadable
		}
		return json.NewEncoder(w).Encode(out)
	}
	if s.Unreadable != "" {
		fmt.Fprintf(w, "unreadable: the stored settings (%q); the session runs on the defaults until `publisher settings --reset` or a new setting replaces them\n", s.Unreadable)
	}
	fmt.Fprintf(w, "stored:    %s\n", stored)
	fmt.Fprintf(w, "in force:  mode %s, debounce %dms, cap %d, drop %s\n", eff.Mode, eff.Debounce.Milliseconds(), eff.Cap, eff.Drop)
	if s.Run != nil {
		fmt.Fprintf(w, "run:       %s\n", s.Run)
	}
	if st := s.State; st != nil {
		if st.AuthProfile != "" {
			fmt.Fprintf(w, "profile:   %s (answered the last turn; the next starts on it)\n", st.AuthProfile)
		}
		if u := st.Usage; u != nil {
			line := fmt.Sprintf("usage:     %d turn(s), %d tokens (input %d, output %d, cache read %d, cache write %d)",
				st.Turns, u.Total, u.Input, u.Output, u.CacheRead, u.CacheWrite)
			if u.Cost != nil {
				line += fmt.Sprintf(", cost $%.6f", u.Cost.Total)
			}
			fmt.Fprintln(w, line)
		}
		if u := st.ChildUsage; u != nil {
			line := fmt.Sprintf("children:  %d tokens of that are its sub-agents'", u.Total)
			if u.Cost != nil {
				line += fmt.Sprintf(", cost $%.6f", u.Cost.Total)
			}
			fmt.Fprintln(w, line)
		}
		if p := st.Parent; p != nil {
			state := "its completion not delivered yet"
			if p.Delivered {
				state = "its completion delivered"
			}
			fmt.Fprintf(w, "parent:    %s run %s (a sub-agent; %s)\n", p.Session, p.Run, state)
		}
		for _, c := range st.Children {
			label := ""
			if c.Label != "" {
				label = fmt.Sprintf(" %q", c.Label)
			}
			fmt.Fprintf(w, "pending:   sub-agent%s %s run %s, spawned by run %s\n", label, c.Session, c.Run, c.ParentRun)
		}
	}
	return nil
}

func printHistory(entries []message.Entry, w io.Writer) error {
	for _, e := range entries {
		if e.Type != message.EntryMessage || e.Message == nil {
			fmt.Fprintf(w, "[%s]\n", e.Type)
			continue
		}
		m := e.Message
		switch m.Role {
		case message.RoleAssistant:
			text := m.Content.Text()
			if m.StopReason == message.StopError || m.StopReason == message.StopAborted {
				text += " [" + string(m.StopReason) + ": " + m.ErrorMessage + "]"
			}
			fmt.Fprintf(w, "assistant (%s/%s): %s\n", m.Provider, m.Model, text)
			// The calls it made, one line each: a turn that only called
			// tools showed as an empty reply.
			for _, c := range m.ToolCalls() {
				args, err := json.Marshal(c.Arguments)
				if err != nil || c.Arguments == nil {
					args = []byte("{}")
				}
				fmt.Fprintf(w, "  → %s %s [%s]\n", c.Name, clipLine(string(args)), c.ID)
			}
		case message.RoleToolResult:
			state := "result"
			if m.IsError {
				state = "error"
			}
			fmt.Fprintf(w, "  ← %s %s [%s]: %s\n", m.ToolName, state, m.ToolCallID, clipLine(m.Content.Text()))
		default:
			fmt.Fprintf(w, "%s: %s\n", m.Role, m.Content.Text())
		}
	}
	return nil
}

// clipLine is s on one line of at most 200 characters.
func clipLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 200 {
		return string(r[:200]) + "…"
	}
	return s
}

// runSchedules is what the schedules say of the runs listed: the run
// each schedule fired last (by session and run), the schedules that send
// to each session.
type runSchedules struct {
	fired    map[[2]string]string
	sessions map[string]int
}

// schedulesOf reads runSchedules off the fleet's schedules.
func schedulesOf(list []*schedule.Schedule) runSchedules {
	rs := runSchedules{fired: map[[2]string]string{}, sessions: map[string]int{}}
	for _, sc := range list {
		if sc.Session != "" {
			rs.sessions[sc.Session]++
		}
		if sc.LastRun != "" {
			rs.fired[[2]string{sc.LastSession, sc.LastRun}] = sc.ID
		}
	}
	return rs
}

// runJSON is a run as runs --json prints it.
type runJSON struct {
	lanefleet.ActiveRun
	// Schedules counts the schedules that send to the run's session;
	// FiredBy names the schedule whose firing the run is.
	Schedules int    `json:"schedules,omitempty"`
	FiredBy   string `json:"firedBy,omitempty"`
}

// printRuns prints the active runs, oldest first, with their sessions'
// pending sub-agents, parent and schedules.
func printRuns(list []lanefleet.ActiveRun, sched runSchedules, asJSON bool, now time.Time, w io.Writer) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range list {
			if err := enc.Encode(runJSON{ActiveRun: r, Schedules: sched.sessions[r.Session], FiredBy: sched.fired[[2]string{r.Session, r.RunID}]}); err != nil {
				return err
			}
		}
		return nil
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "no runs")
		return nil
	}
	for _, r := range list {
		age := now.Sub(r.StartedAt).Round(100 * time.Millisecond)
		phase, why := r.Phase, ""
		switch kvstore.Holding(r.Holding) {
		case kvstore.HoldingUnresponsive:
			phase = r.Holding
			why = fmt.Sprintf(": the worker stopped answering (lease not renewed for %s); another worker takes the run over within %s",
				waitText(now.Sub(r.LeaseRenewed)), waitText(r.LeaseExpires.Sub(now)))
		case kvstore.HoldingLapsed:
			phase = r.Holding
			why = ": the worker holds the lane no more (its lease lapsed); the run starts again when a worker takes the lane"
		}
		marks := lineageText(r.Children, r.Parent, sched.sessions[r.Session])
		if id := sched.fired[[2]string{r.Session, r.RunID}]; id != "" {
			marks += ", fired by schedule " + id
		}
		fmt.Fprintf(w, "%-24s run %-8s %-12s worker %s attempt %d, %s%s%s\n", r.Session, r.RunID, phase, r.Worker, max(r.Attempt, 1), age, why, marks)
	}
	return nil
}
