package authprofile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lanefleet/lanefleet/internal/pathless"
	"github.com/lanefleet/lanefleet/provider"
)

// Secret reference sources.
const (
	RefEnv  = "env"  // an environment variable of the worker
	RefFile = "file" // a file's content, trimmed
	// RefExec is a value an exec secret provider returned: a command the
	// operator declared in the worker's own profiles file (package
	// secretexec runs it). The reference names the provider and an id,
	// never a command.
	RefExec = "exec"
)

// execForm says what an exec reference looks like. It quotes nothing of
// the reference that was refused: a command line may hold a secret.
const execForm = `exec references are exec:PROVIDER:ID (or {"source": "exec", "provider": PROVIDER, "id": ID}), naming a secret provider declared under "secrets": {"providers": …} in the worker's profiles file; a reference never holds a command`

// MaxSecretFileBytes bounds a secret file read for a reference.
const MaxSecretFileBytes = 64 << 10

// MaxExecIDLen bounds an exec reference's id.
const MaxExecIDLen = 256

// ErrSecretRef is wrapped by every failure to parse or resolve a secret
// reference. Its messages name the reference (a variable's name, a
// file's path, a provider and an id), never a secret.
var ErrSecretRef = errors.New("secret reference")

// ErrExecOff is wrapped by the resolution of an exec reference where no
// exec secret provider runs (SecretSources.Exec is nil).
var ErrExecOff = errors.New("exec secret providers are off")

// SecretRef is where a profile's secret is held instead of in the file:
// "env:NAME" (the worker's environment variable NAME), "file:/abs/path"
// (that file's content, surrounding whitespace trimmed),
// "exec:PROVIDER:ID" (the value the operator's exec secret provider
// PROVIDER returned for ID), or OpenClaw's object form {"source": "env",
// "id": "NAME"}, {"source": "exec", "provider": "vault", "id": "ID"}.
type SecretRef struct {
	Source   string // RefEnv, RefFile or RefExec
	Provider string // RefExec: the secret provider's name
	Name     string // the variable's name, the file's absolute path or the exec id
}

// String is the reference as written ("env:NAME", "exec:vault:ID"); it
// holds no secret.
func (r SecretRef) String() string {
	if r.Source == RefExec {
		return r.Source + ":" + r.Provider + ":" + r.Name
	}
	return r.Source + ":" + r.Name
}

// ParseSecretRef parses a profile's keyRef, tokenRef or refreshRef. An
// object with any key but "source", "provider" and "id" is refused (a
// reference never carries a command, its arguments or an environment).
func ParseSecretRef(s string) (SecretRef, error) {
	s = strings.TrimSpace(s)
	if len(s) > 4096 {
		return SecretRef{}, fmt.Errorf("%w: longer than 4096 bytes", ErrSecretRef)
	}
	if strings.HasPrefix(s, "{") {
		return parseRefObject(s)
	}
	src, name, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		// Not quoted: a reference without a source is most often the
		// secret itself, pasted where its reference goes.
		return SecretRef{}, fmt.Errorf("%w: want env:NAME, file:/path or exec:PROVIDER:ID (a secret itself goes in key, token or refresh)", ErrSecretRef)
	case src == RefExec:
		prov, id, _ := strings.Cut(name, ":")
		return execRef(prov, id)
	}
	return pathRef(src, name)
}

// parseRefObject parses OpenClaw's object form.
func parseRefObject(s string) (SecretRef, error) {
	var o map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &o); err != nil {
		return SecretRef{}, fmt.Errorf("%w: not a reference object: %v", ErrSecretRef, err)
	}
	var src, prov, id string
	for _, k := range slices.Sorted(maps.Keys(o)) {
		v := o[k]
		var dst *string
		switch k {
		case "source":
			dst = &src
		case "provider":
			dst = &prov
		case "id":
			dst = &id
		default:
			// The key is the file's; its value is never quoted.
			return SecretRef{}, fmt.Errorf("%w: key %q: a reference object has only source, provider and id; %s", ErrSecretRef, k, execForm)
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return SecretRef{}, fmt.Errorf("%w: %s is not a string", ErrSecretRef, k)
		}
	}
	switch src {
	case RefExec:
		return execRef(prov, id)
	case RefEnv, RefFile:
		// OpenClaw names its built-in env and file sources "default".
		if prov != "" && prov != "default" {
			return SecretRef{}, fmt.Errorf("%w: source %q with provider %q: this worker reads env and file references directly (no provider, or \"default\")", ErrSecretRef, src, prov)
		}
		return pathRef(src, id)
	}
	return SecretRef{}, fmt.Errorf("%w: source %q: want env, file or exec", ErrSecretRef, src)
}

// pathRef is an env or file reference. A name refused is not quoted: it
// may be the secret itself, pasted after "env:" or "file:".
func pathRef(src, name string) (SecretRef, error) {
	switch src {
	case RefEnv:
		if !EnvName(name) {
			return SecretRef{}, fmt.Errorf("%w env:…: not a variable name (letters, digits and _, not starting with a digit)", ErrSecretRef)
		}
	case RefFile:
		if !filepath.IsAbs(name) || strings.ContainsRune(name, 0) {
			return SecretRef{}, fmt.Errorf("%w file:…: want an absolute path", ErrSecretRef)
		}
		name = filepath.Clean(name)
	default:
		return SecretRef{}, fmt.Errorf("%w: source %q: want env:NAME, file:/path or exec:PROVIDER:ID", ErrSecretRef, src)
	}
	return SecretRef{Source: src, Name: name}, nil
}

// execRef is an exec reference; what fails is not quoted (a command
// pasted where the provider goes may hold a secret).
func execRef(prov, id string) (SecretRef, error) {
	if !ExecProviderName(prov) {
		return SecretRef{}, fmt.Errorf("%w: %s", ErrSecretRef, execForm)
	}
	if !execID(id) {
		return SecretRef{}, fmt.Errorf("%w: exec provider %q: the id is 1-%d letters, digits and . _ : / - (starting with a letter or digit, no . or .. segment)", ErrSecretRef, prov, MaxExecIDLen)
	}
	return SecretRef{Source: RefExec, Provider: prov, Name: id}, nil
}

// ExecProviderName reports whether s may name an exec secret provider:
// 1-64 lowercase letters, digits, '_' and '-', starting with a letter
// (OpenClaw's provider alias rule).
func ExecProviderName(s string) bool {
	if s == "" || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// execID reports whether s may be an exec reference's id (OpenClaw's
// rule): letters, digits and . _ : / -, starting with a letter or digit,
// no "." or ".." path segment.
func execID(s string) bool {
	if s == "" || len(s) > MaxExecIDLen {
		return false
	}
	if c := s[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:/-", c) >= 0) {
			return false
		}
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// EnvName reports an environment variable's name: letters, digits and
// '_', not starting with a digit.
func EnvName(s string) bool {
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

// SecretSources is where references are read.
type SecretSources struct {
	// Env looks up env: references' variables (os.Getenv in the worker;
	// nil: an empty environment).
	Env func(name string) string
	// Exec returns the value exec secret provider prov returned for id
	// (package secretexec's Values.Secret, read from memory: the command
	// ran at start or at its last refresh). Nil: exec references fail
	// with ErrExecOff.
	Exec func(prov, id string) (provider.Secret, error)
}

// Resolve reads the secret r names now: env looks up variables, file
// reads the file, exec asks src.Exec. An unset or empty variable, a
// missing, unreadable, empty or over-long (MaxSecretFileBytes) file, an
// exec value that is not there is an error naming r.
func (r SecretRef) Resolve(src SecretSources) (provider.Secret, error) {
	switch r.Source {
	case RefEnv:
		env := src.Env
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
			return "", fmt.Errorf("%w %s: %w", ErrSecretRef, r, pathless.Err(err))
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, MaxSecretFileBytes+1))
		switch {
		case err != nil:
			return "", fmt.Errorf("%w %s: read: %w", ErrSecretRef, r, pathless.Err(err))
		case len(b) > MaxSecretFileBytes:
			return "", fmt.Errorf("%w %s: larger than %d bytes", ErrSecretRef, r, MaxSecretFileBytes)
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			return provider.Secret(v), nil
		}
		return "", fmt.Errorf("%w %s: the file is empty", ErrSecretRef, r)
	case RefExec:
		if src.Exec == nil {
			return "", fmt.Errorf("%w %s: %w", ErrSecretRef, r, ErrExecOff)
		}
		v, err := src.Exec(r.Provider, r.Name)
		if err != nil {
			return "", fmt.Errorf("%w %s: %w", ErrSecretRef, r, err)
		}
		return v, nil
	}
	return "", fmt.Errorf("%w: unknown source %q", ErrSecretRef, r.Source)
}

// Refs returns p's secret references (keyRef, tokenRef, refreshRef), in
// that order, as written.
func (p Profile) Refs() []string {
	var out []string
	for _, r := range []string{p.KeyRef, p.TokenRef, p.RefreshRef} {
		if r != "" {
			out = append(out, r)
		}
	}
	return out
}

// Secret returns the secret p authenticates with: its key, token or OAuth
// access token as the file gives it, else the value its keyRef or
// tokenRef names, read now from src (so a rotated file or variable is
// used from the next call). The error, when there is none, names the
// profile and the reference, never a value.
func (p Profile) Secret(src SecretSources) (provider.Secret, error) {
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
	s, err := r.Resolve(src)
	if err != nil {
		return "", fmt.Errorf("auth profile %q: %w", p.ID, err)
	}
	return s, nil
}

// RefreshSecret returns an OAuth profile's refresh token: its "refresh"
// as the file gives it, else the value its refreshRef names, read now
// from src ("" and nil when it has neither). The error names the profile
// and the reference, never a value.
func (p Profile) RefreshSecret(src SecretSources) (provider.Secret, error) {
	if p.Refresh != "" || p.RefreshRef == "" {
		return p.Refresh, nil
	}
	r, err := ParseSecretRef(p.RefreshRef)
	if err != nil {
		return "", fmt.Errorf("auth profile %q: refreshRef: %w", p.ID, err)
	}
	s, err := r.Resolve(src)
	if err != nil {
		return "", fmt.Errorf("auth profile %q: refreshRef: %w", p.ID, err)
	}
	return s, nil
}
