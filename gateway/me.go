package gateway

import (
	"net/http"

	"github.com/lanefleet/lanefleet/gateway/auth"
)

// MeReply is the answer to GET /api/me: who the caller's token is and
// what it may reach (the console shows only the controls it may use). It
// never carries the token.
type MeReply struct {
	Name     string    `json:"name"`
	Role     auth.Role `json:"role"`
	Prefixes []string  `json:"prefixes"`
	Sessions []string  `json:"sessions,omitempty"`
	Models   []string  `json:"models,omitempty"`
	// Local is set for the unauthenticated loopback caller of a gateway
	// without a token file.
	Local bool `json:"local,omitempty"`
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	rep := MeReply{Name: p.Name, Role: p.Role, Prefixes: p.Prefixes, Sessions: p.Sessions, Models: p.Models, Local: p.Local}
	if rep.Prefixes == nil {
		rep.Prefixes = []string{}
	}
	writeJSON(w, http.StatusOK, rep)
}
