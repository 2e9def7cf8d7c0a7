package authprofile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lanefleet/lanefleet/provider"
)

// Secret reference sources.
const (
	RefEnv  = "env"  // an environment variable of the worker
	RefFile = "file" // a file's content, trimmed
)

// refExec is OpenClaw's command reference, which is refused: a worker
// runs no program a profiles file names (the file would be a way to run
// any command on every worker, with its environment and credentials).
const refExec = "exec"

// execRefused says what to use instead of a command reference. It quotes
// nothing of the reference: a command line may hold a secret.
const execRefused = "command references are refused (a worker runs no program a profiles file names): have the command write the secret to a file and name it with file:/path, or put it in the worker's environment and use env:NAME"

// MaxSecretFileBytes bounds a secret file read for a reference.
const MaxSecretFileBytes = 64 << 10

// ErrSecretRef is wrapped by every failure to parse or resolve a secret
// reference. Its messages name the reference (a variable's name, a
// file's path), never a secret.
var ErrSecretRef = errors.New("secret reference")

// SecretRef is where a profile's secret is held instead of in the file:
// "env:NAME" (the worker's environment variable NAME), "file:/abs/path"
// (that file's content, surrounding whitespace trimmed), or OpenClaw's
// object form {"source": "env", "id": "NAME"}.
type SecretRef struct {
	Source string // RefEnv or RefFile
	Name   string // the variable's name or the file's absolute path
}

// String is the reference as written ("env:NAME"); it holds no secret.
func (r SecretRef) String() string { return r.Source + ":" + r.Name }

// ParseSecretRef parses a profile's keyRef or tokenRef.
func ParseSecretRef(s string) (SecretRef, error) {
	s = strings.TrimSpace(s)
	if len(s) > 4096 {
		return SecretRef{}, fmt.Errorf("%w: longer than 4096 bytes", ErrSecretRef)
	}
	if strings.HasPrefix(s, "{") {
		var o struct {
			Source string `json:"source"`
			ID     string `json:"id"`
		}
		if err := json.Unmarshal([]byte(s), &o); err != nil {
			return SecretRef{}, fmt.Errorf("%w: not a reference object: %v", ErrSecretRef, err)
		}
		switch o.Source {
		case RefEnv:
		case refExec:
			return SecretRef{}, fmt.Errorf("%w: source %q: %s", ErrSecretRef, o.Source, execRefused)
		default:
			return SecretRef{}, fmt.Errorf("%w: source %q: this worker reads env and file references (\"env:NAME\", \"file:/path\")", ErrSecretRef, o.Source)
		}
		s = o.Source + ":" + o.ID
	}
	src, name, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		// Not quoted: a reference without a source is most often the
		// secret itself, pasted where its reference goes.
		return SecretRef{}, fmt.Errorf("%w: want env:NAME or file:/path (a secret itself goes in key, token or refresh)", ErrSecretRef)
	case src == RefEnv:
		if !envName(name) {
			return SecretRef{}, fmt.Errorf("%w %q: not a variable name", ErrSecretRef, s)
		}
	case src == RefFile:
		if !filepath.IsAbs(name) || strings.ContainsRune(name, 0) {
			return SecretRef{}, fmt.Errorf("%w %q: want an absolute path", ErrSecretRef, s)
		}
		name = filepath.Clean(name)
	case src == refExec:
		return SecretRef{}, fmt.Errorf("%w: source %q: %s", ErrSecretRef, src, execRefused)
	default:
		return SecretRef{}, fmt.Errorf("%w: source %q: want env:NAME or file:/path", ErrSecretRef, src)
	}
	return SecretRef{Source: src, Name: name}, nil
}

// envName reports an environment variable's name: letters, digits and
// '_', not starting with a digit.
func envName(s string) bool {
	if s == "" || len(s) > 256 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Resolve reads the secret r names now: env looks up variables (os.Getenv
// in the worker). An unset or empty variable, a missing, unreadable, empty
// or over-long (MaxSecretFileBytes) file is an error naming r.
func (r SecretRef) Resolve(env func(string) string) (provider.Secret, error) {
	switch r.Source {
	case RefEnv:
		if env == nil {
			env = func(string) string { return "" }
		}
		if v := strings.TrimSpace(env(r.Name)); v != "" {
			return provider.Secret(v), nil
		}
		return "", fmt.Errorf("%w %s: the variable is not set", ErrSecretRef, r)
	case RefFile:
		f, err := os.Open(r.Name)
		if err != nil {
			return "", fmt.Errorf("%w %s: %w", ErrSecretRef, r, pathless(err))
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, MaxSecretFileBytes+1))
		switch {
		case err != nil:
			return "", fmt.Errorf("%w %s: read: %w", ErrSecretRef, r, pathless(err))
		case len(b) > MaxSecretFileBytes:
			return "", fmt.Errorf("%w %s: larger than %d bytes", ErrSecretRef, r, MaxSecretFileBytes)
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			return provider.Secret(v), nil
		}
		return "", fmt.Errorf("%w %s: the file is empty", ErrSecretRef, r)
	}
	return "", fmt.Errorf("%w: unknown source %q", ErrSecretRef, r.Source)
}

// Secret returns the secret p authenticates with: its key, token or OAuth
// access token as the file gives it, else the value its keyRef or
// tokenRef names, read now (so a rotated file or variable is used from the
// next call). The error, when there is none, names the profile and the
// reference, never a value.
func (p Profile) Secret(env func(string) string) (provider.Secret, error) {
	switch {
	case p.Key != "":
		return p.Key, nil
	case p.Token != "":
		return p.Token, nil
	case p.Access != "":
		return p.Access, nil
	}
	ref := p.KeyRef
	if ref == "" {
		ref = p.TokenRef
	}
	if ref == "" {
		return "", fmt.Errorf("auth profile %q: no secret", p.ID)
	}
	r, err := ParseSecretRef(ref)
	if err != nil {
		return "", fmt.Errorf("auth profile %q: %w", p.ID, err)
	}
	s, err := r.Resolve(env)
	if err != nil {
		return "", fmt.Errorf("auth profile %q: %w", p.ID, err)
	}
	return s, nil
}

// RefreshSecret returns an OAuth profile's refresh token: its "refresh"
// as the file gives it, else the value its refreshRef names, read now
// ("" and nil when it has neither). The error names the profile and the
// reference, never a value.
func (p Profile) RefreshSecret(env func(string) string) (provider.Secret, error) {
	if p.Refresh != "" || p.RefreshRef == "" {
		return p.Refresh, nil
	}
	r, err := ParseSecretRef(p.RefreshRef)
	if err != nil {
		return "", fmt.Errorf("auth profile %q: refreshRef: %w", p.ID, err)
	}
	s, err := r.Resolve(env)
	if err != nil {
		return "", fmt.Errorf("auth profile %q: refreshRef: %w", p.ID, err)
	}
	return s, nil
}

// pathless is err without the path an *fs.PathError repeats (the
// reference names it).
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
