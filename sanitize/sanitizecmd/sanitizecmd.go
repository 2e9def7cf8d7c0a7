// Package sanitizecmd is the "worker sanitize" command: it reads a stored
// transcript on stdin and writes what one provider would be sent, using
// package sanitize.
package sanitizecmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/sessionfile"
)

const usage = `usage: worker sanitize --provider P --api A --model M [--allowed-tools a,b] [--history-limit N] [--stage sanitized|final]

Reads a transcript on stdin, either a JSON array of pi messages or a pi/OpenClaw
session file (JSON Lines), and writes the JSON array of messages the provider
would be sent (stage final, the default) or the history after sanitising only
(stage sanitized).

`

// ErrUsage is wrapped by errors about the command line.
var ErrUsage = errors.New("sanitize: usage")

// Run runs the command. args are the arguments after "sanitize" (a leading
// "sanitize" is ignored too). Its flags are GNU-style (--provider), as
// every other command's. It returns pflag.ErrHelp after printing the usage
// to stdout for -h, an error wrapping ErrUsage for a bad command line, and
// an error describing the problem for input that is not a transcript.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "sanitize" {
		args = args[1:]
	}
	fs := pflag.NewFlagSet("sanitize", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	var (
		provider = fs.String("provider", "", "provider id, e.g. anthropic, openai, openrouter")
		api      = fs.String("api", "", "model API, e.g. anthropic-messages, openai-responses, google-generative-ai")
		model    = fs.String("model", "", "model id, e.g. claude-opus-4-6")
		allowed  = fs.String("allowed-tools", "", "comma-separated tool names; calls of other tools are dropped")
		limit    = fs.Int("history-limit", 0, "keep only the last N user turns (0 = all)")
		stage    = fs.String("stage", string(sanitize.StageFinal), "sanitized or final")
		now      = fs.Int64("now", 0, "clock in Unix milliseconds for synthetic messages (default: current time)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	case *provider == "" || *api == "" || *model == "":
		return fmt.Errorf("%w: --provider, --api and --model are required", ErrUsage)
	case *stage != string(sanitize.StageSanitized) && *stage != string(sanitize.StageFinal):
		return fmt.Errorf("%w: --stage must be sanitized or final, not %q", ErrUsage, *stage)
	case *limit < 0:
		return fmt.Errorf("%w: --history-limit must not be negative", ErrUsage)
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	msgs, session, err := readTranscript(stdin, stderr)
	if err != nil {
		return err
	}
	req := sanitize.Request{
		Provider: *provider, API: *api, ModelID: *model,
		Messages: msgs, HistoryLimit: *limit, Session: session, Now: *now,
	}
	if *allowed != "" {
		for _, name := range strings.Split(*allowed, ",") {
			if name = strings.TrimSpace(name); name != "" {
				req.AllowedToolNames = append(req.AllowedToolNames, name)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res := sanitize.Prepare(req)

	bw := bufio.NewWriter(stdout)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res.Messages(sanitize.Stage(*stage))); err != nil {
		return fmt.Errorf("sanitize: encode output: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("sanitize: write output: %w", err)
	}
	return nil
}

// readTranscript reads a JSON array of messages or a session file.
func readTranscript(r io.Reader, stderr io.Writer) ([]message.Message, []sanitize.CustomEntry, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, fmt.Errorf("sanitize: read stdin: %w", err)
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, nil, errors.New("sanitize: empty input: expected a JSON array of messages or a session file (JSON Lines)")
	}
	switch trimmed[0] {
	case '[':
		msgs, err := decodeMessages(trimmed)
		return msgs, nil, err
	case '{':
		f, err := sessionfile.Read(bytes.NewReader(data))
		if err != nil {
			return nil, nil, fmt.Errorf("sanitize: read session file: %w", err)
		}
		for _, s := range f.Skipped {
			fmt.Fprintf(stderr, "sanitize: warning: skipped %v\n", s)
		}
		return sessionfile.Messages(f.Entries), customEntries(f.Entries), nil
	}
	return nil, nil, fmt.Errorf("sanitize: input starts with %q: expected a JSON array of messages or a session file (JSON Lines)", trimmed[0])
}

func decodeMessages(data []byte) ([]message.Message, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("sanitize: input is not a JSON array of messages: %w", err)
	}
	msgs := make([]message.Message, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &msgs[i]); err != nil {
			return nil, fmt.Errorf("sanitize: message %d: %w", i, err)
		}
		if msgs[i].Role == "" {
			return nil, fmt.Errorf("sanitize: message %d: no role", i)
		}
	}
	return msgs, nil
}

// customEntries returns the custom entries of a session, in file order.
func customEntries(entries []message.Entry) []sanitize.CustomEntry {
	var out []sanitize.CustomEntry
	for i := range entries {
		e := &entries[i]
		if e.Type != message.EntryCustom {
			continue
		}
		data, _ := e.Fields["data"].(map[string]any)
		out = append(out, sanitize.CustomEntry{CustomType: e.Field("customType"), Data: data})
	}
	return out
}
