// Package auth is who an HTTP caller of the gateway is and what it may
// reach: a Principal, carried in the request's context, that every route
// asks before it touches a session, a model or a fleet operation.
//
// The package is pure: it knows no HTTP server and no NATS.
package auth

import (
	"context"
	"slices"

	"github.com/lanefleet/lanefleet/events"
)

// Role is what a gateway token may do.
type Role string

// The roles, as the fleet's NATS roles name them.
const (
	// Sender sends to and follows its sessions, and reads them.
	Sender Role = "sender"
	// Viewer reads its sessions: events, history, settings, runs.
	Viewer Role = "viewer"
	// Admin may do everything, the fleet's operations included.
	Admin Role = "admin"
)

// Principal is the caller of one request.
type Principal struct {
	// Name names the token (never the token itself): it goes to logs,
	// metrics labels and traces.
	Name string
	// Role is what the caller may do.
	Role Role
	// Prefixes are the session-key prefixes the caller may reach (e.g.
	// "acme:"); an empty prefix reaches every session.
	Prefixes []string
	// Sessions are single session keys the caller may reach besides its
	// prefixes.
	Sessions []string
	// Models, when not empty, are the only model refs (or aliases) the
	// caller may name; empty means every model the fleet runs.
	Models []string
	// Local is true for the unauthenticated loopback caller the gateway
	// serves when it has no token file: it is an admin of everything.
	Local bool
}

// CanSend reports whether the caller may send messages and steer runs.
func (p *Principal) CanSend() bool {
	return p != nil && (p.Role == Sender || p.Role == Admin)
}

// CanRead reports whether the caller may read sessions at all.
func (p *Principal) CanRead() bool {
	return p != nil && (p.Role == Sender || p.Role == Viewer || p.Role == Admin)
}

// IsAdmin reports whether the caller may run the fleet's operations
// (dead letters, every session's runs and backlog).
func (p *Principal) IsAdmin() bool { return p != nil && p.Role == Admin }

// AllowsSession reports whether the caller may reach session key.
func (p *Principal) AllowsSession(key string) bool {
	if p == nil || key == "" {
		return false
	}
	return events.KeyInScope(key, p.Prefixes, p.Sessions)
}

// AllowsModel reports whether the caller may name model ref (a fleet model
// ref or an alias); "" (the fleet's default) is always allowed.
func (p *Principal) AllowsModel(ref string) bool {
	if p == nil {
		return false
	}
	return ref == "" || len(p.Models) == 0 || slices.Contains(p.Models, ref)
}

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the caller ctx carries, or nil: a route that finds
// none must refuse.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(ctxKey{}).(*Principal)
	return p
}
