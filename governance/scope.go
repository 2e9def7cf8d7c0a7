package governance

import (
	"errors"
	"fmt"
	"strconv"
)

// ScopeKind is what a budget applies to.
type ScopeKind string

// Scope kinds.
const (
	ScopeTenant  ScopeKind = "tenant"  // every session of a tenant
	ScopeSession ScopeKind = "session" // one session, by its key
	ScopeRate    ScopeKind = "rate"    // a provider rate limit, by its rule's pattern (rate.go)
)

// MaxKeyLen bounds a session key a scope names (as the lanes bound keys).
const MaxKeyLen = 1024

// ErrBadScope is returned for a scope that names nothing valid.
var ErrBadScope = errors.New("governance: bad scope")

// Scope is one budget's subject: a tenant by name, a session by key or a
// provider rate limit by its pattern.
type Scope struct {
	Kind ScopeKind `json:"kind"`
	Name string    `json:"name"`
}

// Validate reports what is wrong with s.
func (s Scope) Validate() error {
	switch s.Kind {
	case ScopeTenant:
		if err := ValidName(s.Name); err != nil {
			return fmt.Errorf("%w: %w", ErrBadScope, err)
		}
		return nil
	case ScopeSession:
		if s.Name == "" || len(s.Name) > MaxKeyLen {
			return fmt.Errorf("%w: a session key is 1-%d bytes", ErrBadScope, MaxKeyLen)
		}
		return nil
	case ScopeRate:
		if err := validPattern(s.Name); err != nil {
			return fmt.Errorf("%w: %w", ErrBadScope, err)
		}
		return nil
	}
	return fmt.Errorf("%w: kind %.20q (tenant, session or rate)", ErrBadScope, s.Kind)
}

// String is "tenant acme" or `session "acme:42"`.
func (s Scope) String() string {
	switch s.Kind {
	case ScopeSession:
		return "session " + strconv.Quote(s.Name)
	case ScopeRate:
		return "rate limit " + s.Name
	}
	return string(s.Kind) + " " + s.Name
}

// Scopes are the budgets that may apply to a session's calls: its tenant's
// (when it has one) and its own.
func Scopes(tenant, sessionKey string) []Scope {
	out := make([]Scope, 0, 2)
	if tenant != "" {
		out = append(out, Scope{Kind: ScopeTenant, Name: tenant})
	}
	return append(out, Scope{Kind: ScopeSession, Name: sessionKey})
}
