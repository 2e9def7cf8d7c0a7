package secretexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

// ProtocolVersion is the exec provider protocol's version (OpenClaw's).
const ProtocolVersion = 1

// waitDelay bounds the wait for a killed command's pipes (a child of its
// that outlived it may hold them).
const waitDelay = 2 * time.Second

// request is what a command reads on stdin.
type request struct {
	ProtocolVersion int      `json:"protocolVersion"`
	Provider        string   `json:"provider"`
	IDs             []string `json:"ids"`
}

// response is what a command prints on stdout. Errors' messages are the
// command's and are never shown.
type response struct {
	ProtocolVersion *int                       `json:"protocolVersion"`
	Values          map[string]json.RawMessage `json:"values"`
	Errors          map[string]json.RawMessage `json:"errors"`
}

// fetch returns p's values for ids: one run with every id, or, for a
// provider that may print a plain value, one run per id.
func fetch(ctx context.Context, p Provider, env func(string) string, ids []string) (map[string]provider.Secret, error) {
	if p.JSONOnly {
		return run(ctx, p, env, ids)
	}
	out := make(map[string]provider.Secret, len(ids))
	for _, id := range ids {
		v, err := run(ctx, p, env, []string{id})
		if err != nil {
			return nil, err
		}
		out[id] = v[id]
	}
	return out, nil
}

// run runs p's command once for ids and reads its answer.
func run(ctx context.Context, p Provider, env func(string) string, ids []string) (map[string]provider.Secret, error) {
	req, err := json.Marshal(request{ProtocolVersion: ProtocolVersion, Provider: p.Name, IDs: ids})
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrProvider, p.Name, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.Timeout, errTimeout)
	defer cancel()
	rctx, kill := context.WithCancelCause(ctx)
	defer kill(nil)
	cmd := exec.CommandContext(rctx, p.Command, p.Args...)
	cmd.Env = environ(p, env)
	cmd.Dir = "/"
	cmd.Stdin = bytes.NewReader(req)
	stdout := &capped{max: p.MaxOutputBytes, over: func() { kill(errOverflow) }}
	stderr := &counter{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = waitDelay
	killGroup(cmd)
	err = cmd.Run()
	switch cause := context.Cause(rctx); {
	case errors.Is(cause, errOverflow):
		return nil, fmt.Errorf("%w %q: printed more than %d bytes (maxOutputBytes) and was stopped", ErrProvider, p.Name, p.MaxOutputBytes)
	case errors.Is(cause, errTimeout):
		return nil, fmt.Errorf("%w %q: did not finish within %s (timeoutMs) and was stopped", ErrProvider, p.Name, p.Timeout)
	case cause != nil:
		return nil, fmt.Errorf("%w %q: %w", ErrProvider, p.Name, cause)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		status := fmt.Sprintf("exited with status %d", ee.ExitCode())
		if ee.ExitCode() < 0 {
			status = "ended by " + ee.String() // "signal: killed": no output
		}
		return nil, fmt.Errorf("%w %q: %s%s", ErrProvider, p.Name, status, stderr.note())
	case err != nil:
		// Start failures (the program went, a pipe): the error names
		// the program, not what it printed.
		return nil, fmt.Errorf("%w %q: %w", ErrProvider, p.Name, err)
	}
	return p.parse(stdout.b.Bytes(), ids)
}

// parse reads a command's stdout: a protocol response, or (without
// JSONOnly, for one id) the value itself, surrounding whitespace trimmed.
// What fails names the provider and ids, never the output.
func (p Provider) parse(out []byte, ids []string) (map[string]provider.Secret, error) {
	var res response
	if err := json.Unmarshal(out, &res); err != nil || res.ProtocolVersion == nil {
		if !p.JSONOnly && len(ids) == 1 {
			v := strings.TrimSpace(string(out))
			if v == "" {
				return nil, fmt.Errorf("%w %q: printed nothing for id %q", ErrProvider, p.Name, ids[0])
			}
			return map[string]provider.Secret{ids[0]: provider.Secret(v)}, nil
		}
		return nil, fmt.Errorf("%w %q: stdout (%d bytes, not shown) is not a protocol response {\"protocolVersion\": 1, \"values\": {…}} (set \"jsonOnly\": false to take a plain value)", ErrProvider, p.Name, len(out))
	}
	if *res.ProtocolVersion != ProtocolVersion {
		return nil, fmt.Errorf("%w %q: protocolVersion %d, want %d", ErrProvider, p.Name, *res.ProtocolVersion, ProtocolVersion)
	}
	vals := make(map[string]provider.Secret, len(ids))
	for _, id := range ids {
		if _, failed := res.Errors[id]; failed {
			return nil, fmt.Errorf("%w %q: reported an error for id %q (its message is not shown: run the command by hand to see it)", ErrProvider, p.Name, id)
		}
		raw, ok := res.Values[id]
		if !ok {
			return nil, fmt.Errorf("%w %q: gave no value for id %q", ErrProvider, p.Name, id)
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return nil, fmt.Errorf("%w %q: the value for id %q is not a string", ErrProvider, p.Name, id)
		}
		if v = strings.TrimSpace(v); v == "" {
			return nil, fmt.Errorf("%w %q: gave an empty value for id %q", ErrProvider, p.Name, id)
		}
		vals[id] = provider.Secret(v)
	}
	return vals, nil
}

// environ is the command's whole environment: the PassEnv variables the
// worker has set, then Env's.
func environ(p Provider, env func(string) string) []string {
	out := []string{} // never nil: nil would inherit the worker's
	if env != nil {
		for _, n := range p.PassEnv {
			if v := env(n); v != "" {
				out = append(out, n+"="+v)
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(p.Env)) {
		out = append(out, n+"="+p.Env[n])
	}
	return out
}

var (
	errTimeout  = errors.New("timeout")
	errOverflow = errors.New("output too large")
)

// capped keeps at most max bytes; a write past them calls over once (which
// kills the command) and is dropped.
type capped struct {
	b    bytes.Buffer
	max  int
	over func()
	done atomic.Bool
}

func (c *capped) Write(p []byte) (int, error) {
	if c.b.Len()+len(p) > c.max {
		if c.done.CompareAndSwap(false, true) {
			c.over()
		}
		return 0, errOverflow
	}
	return c.b.Write(p)
}

// counter counts stderr's bytes and keeps none (it may hold the secret).
type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// note says how much stderr there was, not what.
func (c *counter) note() string {
	if c.n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d bytes on stderr, not shown: run the command by hand to see them)", c.n)
}
