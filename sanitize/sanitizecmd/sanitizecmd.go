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

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// Long describes the command, for its help.
const Long = `Reads a transcript on stdin, either a JSON array of pi messages or a pi/OpenClaw
session file (JSON Lines), and writes the JSON array of messages the provider
would be sent (stage final, the default) or the history after sanitising only
(stage sanitized).`

// ErrUsage is wrapped by errors about the command line.
var ErrUsage = errors.New("sanitize: usage")

// Options are the command's flags.
type Options struct {
	Provider     string   // provider id, e.g. anthropic (required)
	API          string   // model API, e.g. anthropic-messages (required)
	Model        string   // model id, e.g. claude-opus-4-6 (required)
	AllowedTools []string // calls of other tools are dropped; empty: all kept
	HistoryLimit int      // keep only the last N user turns; 0 = all
	Stage        string   // sanitized, or final (the default when empty)
	Now          int64    // clock in Unix ms for synthetic messages; 0 = now
}

// Run runs the command with o on stdin and stdout (warnings about skipped
// lines of a session file on stderr). It returns an error
// wrapping ErrUsage for options that cannot run, and an error describing
// the problem for input that is not a transcript.
func Run(ctx context.Context, o Options, stdin io.Reader, stdout, stderr io.Writer) error {
	if o.Stage == "" {
		o.Stage = string(sanitize.StageFinal)
	}
	switch {
	case o.Provider == "" || o.API == "" || o.Model == "":
		return fmt.Errorf("%w: --provider, --api and --model are required", ErrUsage)
	case o.Stage != string(sanitize.StageSanitized) && o.Stage != string(sanitize.StageFinal):
		return fmt.Errorf("%w: --stage must be sanitized or final, not %q", ErrUsage, o.Stage)
	case o.HistoryLimit < 0:
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
		Provider: o.Provider, API: o.API, ModelID: o.Model,
		Messages: msgs, HistoryLimit: o.HistoryLimit, Session: session, Now: o.Now,
	}
	for _, name := range o.AllowedTools {
		if name = strings.TrimSpace(name); name != "" {
			req.AllowedToolNames = append(req.AllowedToolNames, name)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res := sanitize.Prepare(req)

	bw := bufio.NewWriter(stdout)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res.Messages(sanitize.Stage(o.Stage))); err != nil {
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
