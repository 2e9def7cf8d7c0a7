// Package chatcmd is the grammar of the chat commands a session's user
// types as a message (/new, /reset, /compact, /model, /think, /verbose,
// /reasoning, /queue, /stop, /status, /help) and the texts of their
// replies. The worker answers them in lane order without calling the
// model; this package only decides what a message's text asks for.
//
// A command is a message whose text, leading blanks aside, starts with
// "/" and a known name, followed by the end of the text, a blank or ":"
// (OpenClaw accepts "/think: high"). Names are matched ignoring case; the
// arguments keep theirs. Anything else, an unknown "/foo" or a path such
// as "/etc/hosts" included, is no command: it goes to the model as
// OpenClaw sends it.
//
// Files: chatcmd.go the grammar (Parse, Command); reply.go the replies
// (Command.Reply, HelpText, StatusText).
//
// The package is pure: no NATS, no clocks.
package chatcmd

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/events"
)

// Name is a command's canonical name.
type Name string

// The commands.
const (
	New       Name = "new"
	Reset     Name = "reset"
	Compact   Name = "compact"
	Model     Name = "model"
	Think     Name = "think"
	Verbose   Name = "verbose"
	Reasoning Name = "reasoning"
	Queue     Name = "queue"
	Stop      Name = "stop"
	Status    Name = "status"
	Help      Name = "help"
)

// names maps every accepted spelling (lower case) to its command,
// OpenClaw's aliases included.
var names = map[string]Name{
	"new": New, "reset": Reset, "compact": Compact,
	"model": Model, "models": Model,
	"think": Think, "thinking": Think, "t": Think,
	"verbose": Verbose, "v": Verbose,
	"reasoning": Reasoning, "reason": Reasoning,
	"queue": Queue, "stop": Stop, "status": Status,
	"help": Help, "commands": Help,
}

// Bounds.
const (
	// MaxNameBytes bounds a command's name: a longer word is no command.
	MaxNameBytes = 16
	// MaxArgBytes bounds the arguments of every command but /new and
	// /reset, whose text after the command is the new session's first
	// message (bounded as any message is, events.MaxTextBytes).
	MaxArgBytes = 4096
)

// Command is a message's text read as a chat command.
type Command struct {
	Name Name
	// Args is the text after the name (and its ":"), blanks trimmed. For
	// /new and /reset it is the first message of the new session ("" =
	// none); for /compact the focus of the summary.
	Args string
	// Err says why the arguments are refused (a *UsageError); the command
	// then changes nothing and its reply is the error.
	Err error
	// Queue and Run are the settings change the command stores (nil =
	// none): /queue, /model, /think, /verbose, /reasoning with an
	// argument. They travel as a settings message's would.
	Queue *events.QueueSettings
	Run   *events.RunSettings
}

// UsageError is a command whose arguments are refused.
type UsageError struct {
	Name   Name
	Reason string
}

func (e *UsageError) Error() string {
	return fmt.Sprintf("/%s: %s (usage: %s)", e.Name, e.Reason, usage[e.Name])
}

// IsChange reports whether c stores a settings change.
func (c *Command) IsChange() bool { return c.Err == nil && (c.Queue != nil || c.Run != nil) }

// Parse reads text as a chat command. It reports false when text is no
// command: it does not start with "/" and a known name followed by the end,
// a blank or ":".
func Parse(text string) (Command, bool) {
	s := strings.TrimLeft(text, " \t\r\n")
	if len(s) < 2 || s[0] != '/' {
		return Command{}, false
	}
	end := 1
	for end < len(s) && end <= MaxNameBytes && isNameByte(s[end]) {
		end++
	}
	if end == 1 || end > MaxNameBytes {
		return Command{}, false
	}
	name, ok := names[strings.ToLower(s[1:end])]
	if !ok {
		return Command{}, false
	}
	rest := s[end:]
	switch {
	case rest == "":
	case rest[0] == ':':
		rest = rest[1:]
	case rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\r' || rest[0] == '\n':
	default:
		return Command{}, false // "/new/x", "/status." : a word, not a command
	}
	c := Command{Name: name, Args: strings.TrimSpace(rest)}
	if name != New && name != Reset && len(c.Args) > MaxArgBytes {
		c.Args = ""
		c.Err = &UsageError{Name: name, Reason: fmt.Sprintf("arguments too long (over %d bytes)", MaxArgBytes)}
		return c, true
	}
	c.Err = c.parseArgs()
	return c, true
}

func isNameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

// parseArgs reads the arguments of the commands that take some.
func (c *Command) parseArgs() error {
	usageErr := func(format string, a ...any) error {
		return &UsageError{Name: c.Name, Reason: fmt.Sprintf(format, a...)}
	}
	word := strings.ToLower(c.Args)
	switch c.Name {
	case Model:
		if word == "" || word == "status" || word == "list" {
			return nil // show
		}
		rs := &events.RunSettings{Model: c.Args}
		if err := rs.Validate(); err != nil {
			return usageErr("%q is not provider/model-id", clip(c.Args))
		}
		c.Run = rs
	case Think:
		if word == "" {
			return nil
		}
		rs := &events.RunSettings{Thinking: word}
		if err := rs.Validate(); err != nil {
			return usageErr("unknown thinking level %q", clip(c.Args))
		}
		c.Run = rs
	case Verbose:
		switch word {
		case "":
		case "on", "full":
			c.Run = &events.RunSettings{Verbose: "on"}
		case "off":
			c.Run = &events.RunSettings{Verbose: "off"}
		default:
			return usageErr("%q is not on or off", clip(c.Args))
		}
	case Reasoning:
		switch word {
		case "":
		case "on", "off", "stream":
			c.Run = &events.RunSettings{Reasoning: word}
		default:
			return usageErr("%q is not on, off or stream", clip(c.Args))
		}
	case Queue:
		if word == "" {
			return nil
		}
		q, err := parseQueue(c.Args)
		if err != nil {
			return usageErr("%s", err.Error())
		}
		c.Queue = q
	}
	return nil
}

// parseQueue reads /queue's arguments: a mode, or reset / default, and
// options debounce:<duration or ms> cap:<n> drop:<policy> (":" or "=").
func parseQueue(args string) (*events.QueueSettings, error) {
	q := &events.QueueSettings{}
	for _, f := range strings.Fields(args) {
		k, v, opt := strings.Cut(f, ":")
		if !opt {
			k, v, opt = strings.Cut(f, "=")
		}
		if !opt {
			switch w := strings.ToLower(f); {
			case w == "reset" || w == "default" || w == "defaults":
				q.Reset = true
			case q.Mode != "":
				return nil, fmt.Errorf("two modes (%q, %q)", clip(q.Mode), clip(f))
			default:
				q.Mode = w
			}
			continue
		}
		switch strings.ToLower(k) {
		case "debounce":
			ms, err := debounceMs(v)
			if err != nil {
				return nil, err
			}
			q.DebounceMs = &ms
		case "cap":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("cap %q is not a number of at least 1", clip(v))
			}
			q.Cap = n
		case "drop":
			q.Drop = strings.ToLower(v)
		default:
			return nil, fmt.Errorf("unknown option %q (debounce, cap, drop)", clip(k))
		}
	}
	if err := q.Validate(); err != nil {
		var de *events.DecodeError
		if errors.As(err, &de) {
			return nil, errors.New(de.Reason)
		}
		return nil, err
	}
	return q, nil
}

// debounceMs reads a debounce: a Go duration ("2s", "500ms") or a number
// of milliseconds.
func debounceMs(v string) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("debounce %q is negative", clip(v))
		}
		return n, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("debounce %q is not a duration (2s, 500ms)", clip(v))
	}
	return d.Milliseconds(), nil
}

// clip shortens what a reply quotes back.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}
