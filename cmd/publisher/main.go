// Command publisher sends messages to Lanefleet sessions and follows their
// replies live.
//
//	publisher send --session KEY [--json] [--no-follow] [--mode M] [--model P/ID] [--thinking L] [--image FILE] TEXT
//	publisher follow --session KEY --run ID [--json]
//	publisher history --session KEY [--json]
//	publisher import --session KEY FILE.jsonl
//
// NATS is reached at --nats-url (env NATS_URL, default nats://127.0.0.1:4222).
package main

import (
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
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
)

const usage = `usage:
  publisher send --session KEY [--json] [--no-follow] [--mode M] [--model P/ID] [--thinking L] [--image FILE] TEXT
  publisher follow --session KEY --run ID [--json]
  publisher history --session KEY [--json]     (--json: a pi session JSONL file)
  publisher import --session KEY FILE.jsonl    (a pi/OpenClaw session file into a new session)
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
	session string
	asJSON  bool
	timeout time.Duration
}

func (c *common) register(fs *flag.FlagSet) {
	def := os.Getenv("NATS_URL")
	if def == "" {
		def = nats.DefaultURL
	}
	fs.StringVar(&c.url, "nats-url", def, "NATS server URL (env NATS_URL)")
	fs.StringVar(&c.session, "session", "", "session key (any UTF-8 string up to 256 bytes)")
	fs.BoolVar(&c.asJSON, "json", false, "print one JSON object per line")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up following after this long")
}

// open connects and bounds the command by --timeout; done releases both.
func (c *common) open(ctx context.Context) (*lanefleet.Client, context.Context, func(), error) {
	cl, err := lanefleet.Connect(c.url, nats.Timeout(3*time.Second))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cannot reach NATS at %s (is a worker running? set --nats-url or NATS_URL): %w", c.url, errors.Unwrap(err))
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
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("publisher "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
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
		)
		fs.Var(&images, "image", "attach an image file (repeatable)")
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
		// Say what is wrong with the message before touching the network.
		check := events.Inbound{Text: text, Mode: *mode, Model: *model, Thinking: *thinking}
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

// follow prints a run's events until its final event.
func follow(ctx context.Context, r *lanefleet.Run, asJSON bool, stdout, stderr io.Writer) error {
	enc := json.NewEncoder(stdout)
	var printed string
	for ev, err := range r.Events(ctx) {
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("run %s: no final event before --timeout (is a worker running?)", r.ID)
			}
			return err
		}
		if asJSON {
			if err := enc.Encode(ev); err != nil {
				return err
			}
		} else {
			switch ev.Stream {
			case events.StreamAssistant:
				// Print only what is new, so a restarted run does not repeat.
				if strings.HasPrefix(ev.Data.Text, printed) && ev.Data.Text != "" {
					fmt.Fprint(stdout, ev.Data.Text[len(printed):])
					printed = ev.Data.Text
				} else {
					fmt.Fprint(stdout, ev.Data.Delta)
					printed += ev.Data.Delta
				}
			case events.StreamThinking:
				fmt.Fprintf(stderr, "\x1b[2m%s\x1b[0m", ev.Data.Delta)
			case events.StreamTool:
				if ev.Data.Phase == "start" || ev.Data.Phase == "result" {
					fmt.Fprintf(stderr, "\n[tool %s %s]\n", ev.Data.Name, ev.Data.Phase)
				}
			case events.StreamLifecycle:
				if ev.Data.Phase == events.PhaseRestart {
					fmt.Fprintf(stderr, "\n[the worker running this turn stopped; restarted on %s]\n", ev.Data.Worker)
					printed = ""
				}
			}
		}
		if ev.Terminal() {
			res := ev.Data.Result
			if res != nil && res.Meta.MergedInto != "" && res.Meta.MergedInto != r.ID {
				if !asJSON {
					fmt.Fprintf(stderr, "[collected with other queued messages into run %s]\n", res.Meta.MergedInto)
				}
				return follow(ctx, r.Follow(res.Meta.MergedInto), asJSON, stdout, stderr)
			}
			if !asJSON && printed == "" && res != nil {
				for _, p := range res.Payloads {
					if !p.IsError {
						fmt.Fprint(stdout, p.Text)
						printed = p.Text
					}
				}
			}
			if !asJSON && printed != "" {
				fmt.Fprintln(stdout)
			}
			if res != nil && res.Meta.Error != nil {
				if !asJSON {
					fmt.Fprintf(stderr, "error (%s): %s\n", res.Meta.Error.Kind, res.Meta.Error.Message)
					return errReported
				}
				return fmt.Errorf("run ended in error (%s): %s", res.Meta.Error.Kind, res.Meta.Error.Message)
			}
			return nil
		}
	}
	return fmt.Errorf("run %s: event stream ended without a final event", r.ID)
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
