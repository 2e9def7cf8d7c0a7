package secretexec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/internal/pathless"
)

// Bounds and defaults of a declaration.
const (
	TimeoutDefault        = 10 * time.Second
	TimeoutMax            = 2 * time.Minute
	MaxOutputBytesDefault = 64 << 10
	MaxOutputBytesMax     = 1 << 20
	RefreshDefault        = 5 * time.Minute
	RefreshMin            = 10 * time.Second
	MaxProviders          = 32
	MaxArgs               = 64
	MaxArgLen             = 4096
	MaxEnv                = 64
)

// ErrProvider is wrapped by every failure to declare, start or run a
// secret provider. Its messages name the provider (and, for a
// declaration, the command's path), never what the command printed.
var ErrProvider = errors.New("secret provider")

// Provider is one declared exec secret provider.
type Provider struct {
	Name    string
	Command string   // absolute path (Check resolves its symlinks)
	Args    []string // its arguments, as given (no shell)
	// PassEnv names the worker's environment variables the command gets
	// (those set); Env sets others. The command gets nothing else.
	PassEnv []string
	Env     map[string]string
	// Timeout bounds one run; MaxOutputBytes its stdout.
	Timeout        time.Duration
	MaxOutputBytes int
	// JSONOnly: stdout must be a protocol response; false also takes a
	// plain value (the provider is then run once per id).
	JSONOnly bool
	// Refresh is how often the values are read again.
	Refresh time.Duration
}

// decl is a provider as the file declares it (OpenClaw's field names).
type decl struct {
	Source         string            `json:"source"`
	Command        string            `json:"command"`
	Args           []string          `json:"args"`
	PassEnv        []string          `json:"passEnv"`
	Env            map[string]string `json:"env"`
	TimeoutMs      int64             `json:"timeoutMs"`
	MaxOutputBytes int               `json:"maxOutputBytes"`
	JSONOnly       *bool             `json:"jsonOnly"`
	RefreshMs      int64             `json:"refreshMs"`
}

// Decode reads the secret providers declared in an auth-profiles.json
// document, under "secrets": {"providers": {NAME: {...}}} (none is no
// error). Every provider is an exec provider; unknown fields are refused,
// as are bounds out of range. It checks the declaration only: Check
// looks at the command on disk.
func Decode(data []byte) (map[string]Provider, error) {
	var doc struct {
		Secrets *struct {
			Providers map[string]json.RawMessage `json:"providers"`
		} `json:"secrets"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: secrets: %w", ErrProvider, err)
	}
	if doc.Secrets == nil || len(doc.Secrets.Providers) == 0 {
		return nil, nil
	}
	if len(doc.Secrets.Providers) > MaxProviders {
		return nil, fmt.Errorf("%w: more than %d providers", ErrProvider, MaxProviders)
	}
	out := make(map[string]Provider, len(doc.Secrets.Providers))
	for _, name := range slices.Sorted(maps.Keys(doc.Secrets.Providers)) {
		p, err := decode(name, doc.Secrets.Providers[name])
		if err != nil {
			return nil, err
		}
		out[name] = p
	}
	return out, nil
}

// decode reads and checks one declaration.
func decode(name string, raw json.RawMessage) (Provider, error) {
	if !authprofile.ExecProviderName(name) {
		return Provider{}, fmt.Errorf("%w %q: a name is 1-64 lowercase letters, digits, _ and -, starting with a letter", ErrProvider, name)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var d decl
	if err := dec.Decode(&d); err != nil {
		return Provider{}, fmt.Errorf("%w %q: %w", ErrProvider, name, err)
	}
	bad := func(format string, a ...any) (Provider, error) {
		return Provider{}, fmt.Errorf("%w %q: %s", ErrProvider, name, fmt.Sprintf(format, a...))
	}
	switch {
	case d.Source != "exec":
		return bad(`source %q: this worker declares exec providers only (env: and file: references need none)`, d.Source)
	case !filepath.IsAbs(d.Command) || strings.ContainsRune(d.Command, 0):
		return bad("command: want the program's absolute path (it runs without a shell; arguments go in args)")
	case len(d.Args) > MaxArgs:
		return bad("more than %d args", MaxArgs)
	case len(d.PassEnv)+len(d.Env) > MaxEnv:
		return bad("more than %d environment variables", MaxEnv)
	case d.TimeoutMs < 0 || time.Duration(d.TimeoutMs)*time.Millisecond > TimeoutMax:
		return bad("timeoutMs: want 1 to %d (0: %d)", TimeoutMax.Milliseconds(), TimeoutDefault.Milliseconds())
	case d.MaxOutputBytes < 0 || d.MaxOutputBytes > MaxOutputBytesMax:
		return bad("maxOutputBytes: want 1 to %d (0: %d)", MaxOutputBytesMax, MaxOutputBytesDefault)
	case d.RefreshMs < 0 || d.RefreshMs > 0 && time.Duration(d.RefreshMs)*time.Millisecond < RefreshMin:
		return bad("refreshMs: want at least %d (0: %d)", RefreshMin.Milliseconds(), RefreshDefault.Milliseconds())
	}
	for i, a := range d.Args {
		if len(a) > MaxArgLen || strings.ContainsRune(a, 0) {
			return bad("args[%d]: longer than %d bytes or holds a NUL", i, MaxArgLen)
		}
	}
	for _, n := range d.PassEnv {
		if !authprofile.EnvName(n) {
			return bad("passEnv: %q is not a variable name", n)
		}
	}
	for n, v := range d.Env {
		if !authprofile.EnvName(n) || strings.ContainsRune(v, 0) {
			return bad("env: %q is not a variable name, or its value holds a NUL", n)
		}
	}
	p := Provider{Name: name, Command: filepath.Clean(d.Command), Args: d.Args, PassEnv: d.PassEnv, Env: d.Env,
		Timeout: time.Duration(d.TimeoutMs) * time.Millisecond, MaxOutputBytes: d.MaxOutputBytes, JSONOnly: d.JSONOnly == nil || *d.JSONOnly,
		Refresh: time.Duration(d.RefreshMs) * time.Millisecond}
	if p.Timeout == 0 {
		p.Timeout = TimeoutDefault
	}
	if p.MaxOutputBytes == 0 {
		p.MaxOutputBytes = MaxOutputBytesDefault
	}
	if p.Refresh == 0 {
		p.Refresh = RefreshDefault
	}
	return p, nil
}

// Check resolves p's command once: its symlinks are followed now, and the
// program that runs from then on is the file found, which must be a
// regular, executable file that other users may not write.
func (p Provider) Check() (Provider, error) {
	path, err := filepath.EvalSymlinks(p.Command)
	if err != nil {
		return p, fmt.Errorf("%w %q: command %s: %w", ErrProvider, p.Name, p.Command, pathless.Err(err))
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return p, fmt.Errorf("%w %q: command %s: %w", ErrProvider, p.Name, p.Command, pathless.Err(err))
	case !fi.Mode().IsRegular():
		return p, fmt.Errorf("%w %q: command %s is not a regular file", ErrProvider, p.Name, path)
	case fi.Mode().Perm()&0o111 == 0:
		return p, fmt.Errorf("%w %q: command %s is not executable", ErrProvider, p.Name, path)
	case fi.Mode().Perm()&0o002 != 0:
		return p, fmt.Errorf("%w %q: command %s is writable by every user: make it writable only by its owner", ErrProvider, p.Name, path)
	}
	p.Command = path
	return p, nil
}
