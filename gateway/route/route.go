// Package route is the gateway's route table entry: every HTTP route the
// gateway serves is declared as a Route, so the server mounts them in one
// place and the tenant-isolation test walks them all (a route added
// without saying what it reaches fails that test).
package route

import "net/http"

// Reach is what a route touches, and so what its caller must be allowed.
type Reach int

// What a route reaches.
const (
	// Public routes answer anyone (health, the OpenAPI document, the
	// console's assets).
	Public Reach = iota
	// Caller routes answer about the caller alone (its models, its own
	// sessions list): they need a principal and filter by it.
	Caller
	// Session routes read one session the request names (path, header,
	// body or an id that encodes it): the handler must refuse a session
	// the principal does not reach, with 404, before anything else.
	Session
	// SessionWrite routes send to or steer one session: as Session, and
	// the principal must be allowed to send.
	SessionWrite
	// Fleet routes are the fleet's operations (dead letters, every run):
	// admins only.
	Fleet
)

// Route is one HTTP route.
type Route struct {
	// Method and Pattern are as net/http.ServeMux reads them
	// ("POST", "/v1/chat/completions", "/v1/sessions/{key}/messages").
	Method  string
	Pattern string
	// Reach says what the route touches.
	Reach Reach
	// Handler serves it; the server has put the caller's principal in the
	// request's context (auth.FromContext) before it runs.
	Handler http.Handler
}
