package governance

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ScopeKind is what a budget applies to.
type ScopeKind string

// Scope kinds.
const (
	ScopeTenant  ScopeKind = "tenant"  // every session of a tenant
	ScopeSession ScopeKind = "session" // one session, by its key
	ScopeAgent   ScopeKind = "agent"   // every session of an agent, by its id
	ScopeProfile ScopeKind = "profile" // every call made with an auth profile, by its id
	ScopeRate    ScopeKind = "rate"    // a provider rate limit, by its rule's pattern (rate.go)
)

// MaxKeyLen bounds a session key a scope names (as the lanes bound keys).
const MaxKeyLen = 1024

// ErrBadScope is returned for a scope that names nothing valid.
var ErrBadScope = errors.New("governance: bad scope")

// MaxProfileLen bounds an auth profile's id a scope names.
const MaxProfileLen = 128

// Scope is one budget's subject: a tenant by name, a session by key, an
// agent by id, an auth profile by id or a provider rate limit by its
// pattern.
type Scope struct {
	Kind ScopeKind `json:"kind"`
	Name string    `json:"name"`
}

// Validate reports what is wrong with s.
func (s Scope) Validate() error {
	switch s.Kind {
	case ScopeTenant, ScopeAgent:
		if err := ValidName(s.Name); err != nil {
			return fmt.Errorf("%w: %w", ErrBadScope, err)
		}
		return nil
	case ScopeSession:
		if s.Name == "" || len(s.Name) > MaxKeyLen {
			return fmt.Errorf("%w: a session key is 1-%d bytes", ErrBadScope, MaxKeyLen)
		}
		return nil
	case ScopeProfile:
		if s.Name == "" || len(s.Name) > MaxProfileLen || strings.ContainsFunc(s.Name, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return fmt.Errorf("%w: an auth profile id is 1-%d printable ASCII characters without spaces", ErrBadScope, MaxProfileLen)
		}
		return nil
	case ScopeRate:
		if err := validPattern(s.Name); err != nil {
			return fmt.Errorf("%w: %w", ErrBadScope, err)
		}
		return nil
	}
	return fmt.Errorf("%w: kind %.20q (tenant, session, agent, profile or rate)", ErrBadScope, s.Kind)
}

// String is "tenant acme", `session "acme:42"`, "agent support" or
// `auth profile "openai:work"`.
func (s Scope) String() string {
	switch s.Kind {
	case ScopeSession:
		return "session " + strconv.Quote(s.Name)
	case ScopeProfile:
		return "auth profile " + strconv.Quote(s.Name)
	case ScopeRate:
		return "rate limit " + s.Name
	}
	return string(s.Kind) + " " + s.Name
}

// Scopes are the budgets that may apply to a session's calls before the
// auth profile of a call is known: its tenant's and its agent's (when it
// has them) and its own. They are the budgets that pause the session.
func Scopes(tenant, agent, sessionKey string) []Scope {
	out := make([]Scope, 0, 4)
	if tenant != "" {
		out = append(out, Scope{Kind: ScopeTenant, Name: tenant})
	}
	if agent != "" {
		out = append(out, Scope{Kind: ScopeAgent, Name: agent})
	}
	return append(out, Scope{Kind: ScopeSession, Name: sessionKey})
}

// CallScopes are the budgets a model call is admitted against: the
// session's (Scopes) and, when the call is made with one, its auth
// profile's.
func CallScopes(tenant, agent, sessionKey, profile string) []Scope {
	out := Scopes(tenant, agent, sessionKey)
	if profile != "" {
		out = append(out, Scope{Kind: ScopeProfile, Name: profile})
	}
	return out
}
