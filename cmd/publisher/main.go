// Command publisher sends messages to Lanefleet sessions and follows their
// replies live.
//
//	publisher send --session KEY [--json] [--no-follow] [--mode M] [--model P/ID] [--thinking L] [--image FILE]
//	               [--tool-file FILE] [--tool-result ID=TEXT] [--tool-error ID=TEXT] TEXT
//	publisher follow --session KEY --run ID [--json]
//	publisher settings --session KEY [--mode M] [--debounce D] [--cap N] [--drop old|new|summarize] [--reset]
//	publisher stop --session KEY [--no-follow]
//	publisher history --session KEY [--json]
//	publisher import --session KEY FILE.jsonl
//
// send and follow show the run live: the reply on stdout, and on stderr the
// reasoning, tool calls and results, compaction, restarts and errors
// (colored on a terminal, plain text otherwise); --json prints the raw
// events, one per line. A run that stops for client tools lists the calls
// to answer with --tool-result.
//
// NATS is reached at --nats-url (env NATS_URL, default nats://127.0.0.1:4222)
// with the nats CLI's credentials: --creds, --nkey, --user/--password,
// --tlscert/--tlskey/--tlsca and --inbox-prefix, or NATS_CREDS, NATS_NKEY,
// NATS_USER, NATS_PASSWORD, NATS_CERT, NATS_KEY, NATS_CA, NATS_INBOX_PREFIX.
// A sender's user needs only its sessions' subjects (see the README's roles).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
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

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/message"
)

const usage = `usage:
  publisher send --session KEY [--json] [--no-follow] [--mode M] [--model P/ID] [--thinking L] [--image FILE]
                 [--tool-file FILE] [--tool-result ID=TEXT|@FILE] [--tool-error ID=TEXT] TEXT
  publisher follow --session KEY --run ID [--json]
  publisher settings --session KEY [--mode M] [--debounce D] [--cap N] [--drop old|new|summarize] [--reset]
                                   (no change: print the stored settings)
  publisher stop --session KEY [--no-follow]   (end the running turn; drops what was queued before)
  publisher history --session KEY [--json]     (--json: a pi session JSONL file)
  publisher import --session KEY FILE.jsonl    (a pi/OpenClaw session file into a new session)
  publisher runs [--json]                      (the runs workers are running now; the admin role)

every command: [--nats-url URL] [--creds FILE | --nkey FILE] [--user U --password P]
               [--tlscert FILE --tlskey FILE] [--tlsca FILE] [--inbox-prefix P] [--timeout D]
               (or NATS_URL, NATS_CREDS, NATS_NKEY, NATS_USER, NATS_PASSWORD, NATS_CERT,
               NATS_KEY, NATS_CA, NATS_INBOX_PREFIX)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "publisher:", err)
		}
		os.Exit(1)
	}
}

// errReported is a failure already explained on stderr.
var errReported = errors.New("reported")

type common struct {
	url     string
	creds   lanefleet.Credentials
	session string
	asJSON  bool
	timeout time.Duration
	getenv  func(string) string
}

func (c *common) register(fs *flag.FlagSet) {
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
	fs.StringVar(&c.session, "session", "", "session key (any UTF-8 string up to 256 bytes)")
	fs.BoolVar(&c.asJSON, "json", false, "print one JSON object per line")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up following after this long")
}

// open connects and bounds the command by --timeout; done releases both.
func (c *common) open(ctx context.Context) (*lanefleet.Client, context.Context, func(), error) {
	url := cmp.Or(c.url, c.getenv("NATS_URL"), nats.DefaultURL)
	opts, err := c.creds.Or(lanefleet.CredentialsFromEnv(c.getenv)).Options()
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := lanefleet.Connect(url, append(opts, nats.Timeout(3*time.Second))...)
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
		return fmt.Errorf("%s: --session is required", cmd)
	}
	if err := events.ValidateKey(c.session); err != nil {
		return fmt.Errorf("%s: --session: %w", cmd, err)
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runEnv(ctx, args, stdout, stderr, os.Getenv)
}

// runEnv is run with the environment read through getenv.
func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("publisher "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := common{getenv: getenv}
	c.register(fs)
	switch cmd {
	case "send":
		var (
			noFollow = fs.Bool("no-follow", false, "publish and print the run id without following the reply")
			mode     = fs.String("mode", "", "queue mode: followup, collect, steer, steer-backlog, interrupt, reject, rollback")
			model    = fs.String("model", "", "model provider/model-id")
			thinking = fs.String("thinking", "", "thinking level: off, minimal, low, medium, high, xhigh")
			msgID    = fs.String("id", "", "message id for de-duplication (default random)")
			images   multiFlag
			tools    multiFlag
			results  multiFlag
			failures multiFlag
		)
		fs.Var(&images, "image", "attach an image file (repeatable)")
		fs.Var(&tools, "tool-file", "offer the client tools defined in a JSON file (repeatable): an array of {name, description, parameters}")
		fs.Var(&results, "tool-result", "answer a pending tool call: ID=TEXT, or ID=@FILE (repeatable)")
		fs.Var(&failures, "tool-error", "answer a pending tool call with an error: ID=TEXT (repeatable)")
		if err := parse(fs, args); err != nil {
			return err
		}
		text := strings.Join(fs.Args(), " ")
		if err := c.checkSession("send"); err != nil {
			return err
		}
		opts := []lanefleet.SendOption{lanefleet.WithMode(*mode), lanefleet.WithModel(*model), lanefleet.WithThinking(*thinking), lanefleet.WithMessageID(*msgID)}
		if c.asJSON {
			opts = append(opts, lanefleet.WithJSON())
		}
		for _, path := range images {
			data, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("send: --image: %w", err)
			}
			mt := mime.TypeByExtension(strings.ToLower(filepath.Ext(path)))
			if !strings.HasPrefix(mt, "image/") {
				return fmt.Errorf("send: --image %s: not an image file type (%q)", path, mt)
			}
			opts = append(opts, lanefleet.WithImage(mt, data))
		}
		var toolDefs []events.ClientTool
		for _, path := range tools {
			defs, err := readTools(path)
			if err != nil {
				return fmt.Errorf("send: --tool-file: %w", err)
			}
			toolDefs = append(toolDefs, defs...)
		}
		answers, err := toolResults(results, failures)
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if len(toolDefs) > 0 {
			opts = append(opts, lanefleet.WithTools(toolDefs...))
		}
		if len(answers) > 0 {
			opts = append(opts, lanefleet.WithToolResults(answers...))
		}
		// Say what is wrong with the message before touching the network.
		check := events.Inbound{Text: text, Mode: *mode, Model: *model, Thinking: *thinking, Tools: toolDefs, ToolResults: answers}
		if len(images) > 0 {
			check.Images = []events.Image{{MimeType: "image/png", Data: "AA=="}}
		}
		if err := check.Validate(); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		cl, ctx, done, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer done()
		r, err := cl.Send(ctx, c.session, text, opts...)
		if err != nil {
			return err
		}
		if *noFollow {
			if c.asJSON {
				return json.NewEncoder(stdout).Encode(map[string]any{"session": r.Session, "run": r.ID, "duplicate": r.Duplicate})
			}
			fmt.Fprintf(stdout, "sent: session %s run %s\n", r.Session, r.ID)
			return nil
		}
		return follow(ctx, r, c.asJSON, stdout, stderr)
	case "follow":
		runID := fs.String("run", "", "run id (printed by send --no-follow)")
		if err := parse(fs, args); err != nil {
			return err
		}
		if *runID == "" {
			return errors.New("follow: --run is required")
		}
		if err := c.checkSession("follow"); err != nil {
			return err
		}
		cl, ctx, done, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer done()
		return follow(ctx, cl.Run(c.session, *runID), c.asJSON, stdout, stderr)
	case "settings":
		return settings(ctx, fs, &c, args, stdout, stderr)
	case "stop":
		return stop(ctx, fs, &c, args, stdout, stderr)
	case "history":
		if err := parse(fs, args); err != nil {
			return err
		}
		if err := c.checkSession("history"); err != nil {
			return err
		}
		cl, ctx, done, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer done()
		if c.asJSON {
			return cl.Export(ctx, c.session, stdout)
		}
		entries, err := cl.History(ctx, c.session)
		if err != nil {
			return err
		}
		return printHistory(entries, stdout)
	case "import":
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return errors.New("import: usage: publisher import --session KEY FILE.jsonl")
		}
		if err := c.checkSession("import"); err != nil {
			return err
		}
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		defer f.Close()
		cl, ctx, done, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer done()
		if err := cl.Import(ctx, c.session, f); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "imported %s into session %s\n", fs.Arg(0), c.session)
		return nil
	case "runs":
		if err := parse(fs, args); err != nil {
			return err
		}
		cl, ctx, done, err := c.open(ctx)
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
		return printRuns(list, c.asJSON, time.Now(), stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

func parse(fs *flag.FlagSet, args []string) error {
	// Allow flags after the text too: "send --session a hello --json".
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") {
				if f := fs.Lookup(name); f != nil {
					if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
						if i+1 < len(args) {
							flags = append(flags, args[i+1])
							i++
						}
					}
				}
			}
			continue
		}
		rest = append(rest, a)
	}
	if err := fs.Parse(flags); err != nil {
		return err
	}
	return fs.Parse(append(fs.Args(), rest...))
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// follow shows a run's events until its final event (raw JSON lines with
// asJSON). A message merged into another run is followed into that run.
func follow(ctx context.Context, r *lanefleet.Run, asJSON bool, stdout, stderr io.Writer) error {
	return followWith(ctx, r, asJSON, newView(stdout, stderr, r.Session), json.NewEncoder(stdout))
}

func followWith(ctx context.Context, r *lanefleet.Run, asJSON bool, v *view, enc *json.Encoder) error {
	waiting := lanefleet.RunState("")
	r.OnWait(waitNoteAfter, func(s lanefleet.RunState) {
		waiting = s
		switch s {
		case lanefleet.RunNoWorker:
			v.note("%s", v.style(dim, fmt.Sprintf("… no worker is running: run %s is stored and runs when one starts (waiting; Ctrl-C to stop)", r.ID)))
		case lanefleet.RunQueued:
			v.note("%s", v.style(dim, fmt.Sprintf("… run %s waits on the session's lane for its turn", r.ID)))
		}
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

// settings prints or changes a session's stored queue settings.
func settings(ctx context.Context, fs *flag.FlagSet, c *common, args []string, stdout, stderr io.Writer) error {
	var (
		mode     = fs.String("mode", "", "mode of messages that name none: followup, collect, steer, steer-backlog, interrupt, reject, rollback")
		debounce = fs.String("debounce", "", "collect: quiet time before a queued batch runs (1s, 500ms, or milliseconds)")
		capN     = fs.Int("cap", 0, "collect: most messages merged into one turn")
		drop     = fs.String("drop", "", "collect, over the cap: old, new or summarize")
		reset    = fs.Bool("reset", false, "clear the stored settings first")
		noFollow = fs.Bool("no-follow", false, "do not wait until a worker has applied the change")
	)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.checkSession("settings"); err != nil {
		return err
	}
	q := events.QueueSettings{Mode: *mode, Cap: *capN, Drop: *drop, Reset: *reset}
	if *debounce != "" {
		d, err := time.ParseDuration(*debounce)
		if err != nil {
			ms, perr := strconv.ParseInt(*debounce, 10, 64)
			if perr != nil {
				return fmt.Errorf("settings: --debounce %q: want a duration (1s, 500ms) or milliseconds", *debounce)
			}
			d = time.Duration(ms) * time.Millisecond
		}
		ms := d.Milliseconds()
		q.DebounceMs = &ms
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	cl, ctx, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	if q == (events.QueueSettings{}) {
		o, err := cl.QueueSettings(ctx, c.session)
		if err != nil {
			return err
		}
		stored := lanefleet.QueueSettingsOf(o)
		eff := queue.Resolve(o)
		if o.Mode == "" {
			eff.Mode = queue.ModeFollowup // the fleet's default for messages without a mode
		}
		if c.asJSON {
			return json.NewEncoder(stdout).Encode(map[string]any{"session": c.session, "stored": stored,
				"effective": map[string]any{"mode": eff.Mode, "debounceMs": eff.Debounce.Milliseconds(), "cap": eff.Cap, "drop": eff.Drop}})
		}
		fmt.Fprintf(stdout, "stored:    %s\n", stored)
		fmt.Fprintf(stdout, "in force:  mode %s, debounce %dms, cap %d, drop %s\n", eff.Mode, eff.Debounce.Milliseconds(), eff.Cap, eff.Drop)
		return nil
	}
	// A reset is its own message, followed by one with the values set.
	var r *lanefleet.Run
	if *reset {
		if r, err = cl.ResetQueueSettings(ctx, c.session); err != nil {
			return err
		}
	}
	if q.Reset = false; q != (events.QueueSettings{}) {
		if r, err = cl.SetQueueSettings(ctx, c.session, lanefleet.OverridesOf(&q)); err != nil {
			return err
		}
	}
	if *noFollow {
		fmt.Fprintf(stdout, "sent: session %s run %s (applies to messages sent after it)\n", r.Session, r.ID)
		return nil
	}
	return follow(ctx, r, c.asJSON, stdout, stderr)
}

// stop ends a session's running turn and prints what it stopped.
func stop(ctx context.Context, fs *flag.FlagSet, c *common, args []string, stdout, stderr io.Writer) error {
	noFollow := fs.Bool("no-follow", false, "do not wait until a worker has stopped the turn")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.checkSession("stop"); err != nil {
		return err
	}
	cl, ctx, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	r, err := cl.Stop(ctx, c.session)
	if err != nil {
		return err
	}
	if *noFollow {
		fmt.Fprintf(stdout, "sent: session %s run %s\n", r.Session, r.ID)
		return nil
	}
	return follow(ctx, r, c.asJSON, stdout, stderr)
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
		default:
			fmt.Fprintf(w, "%s: %s\n", m.Role, m.Content.Text())
		}
	}
	return nil
}

// printRuns prints the active runs, oldest first.
func printRuns(list []lanefleet.ActiveRun, asJSON bool, now time.Time, w io.Writer) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range list {
			if err := enc.Encode(r); err != nil {
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
		fmt.Fprintf(w, "%-24s run %-8s %-10s worker %s attempt %d, %s\n", r.Session, r.RunID, r.Phase, r.Worker, max(r.Attempt, 1), age)
	}
	return nil
}
