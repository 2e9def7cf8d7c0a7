package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/agentstore"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/route"
)

// agentRoutes are the named agents' routes: admins define and remove
// agents; any caller may read the agents whose sessions it reaches.
func (s *Server) agentRoutes() []route.Route {
	h := func(f http.HandlerFunc) http.Handler { return f }
	return []route.Route{
		{Method: "GET", Pattern: "/api/agents", Reach: route.Caller, Handler: h(s.listAgents)},
		{Method: "GET", Pattern: "/api/agents/{id}", Reach: route.Caller, Handler: h(s.getAgent)},
		{Method: "PUT", Pattern: "/api/agents/{id}", Reach: route.Fleet, Handler: h(s.putAgent)},
		{Method: "DELETE", Pattern: "/api/agents/{id}", Reach: route.Fleet, Handler: h(s.deleteAgent)},
	}
}

// AgentList is GET /api/agents.
type AgentList struct {
	Agents []*agents.Agent `json:"agents"`
}

// reachesAgent reports whether p reaches any session of agent id: an
// admin does; another caller when one of its prefixes covers
// "agent:<id>:" (or lies under it), or one of its single sessions is the
// agent's. A tenant whose prefix is "acme:" sees no agent: its sessions
// never name one.
func reachesAgent(p *auth.Principal, id string) bool {
	if p.IsAdmin() {
		return true
	}
	open := "agent:" + id + ":"
	for _, pre := range p.Prefixes {
		if strings.HasPrefix(open, pre) || strings.HasPrefix(pre, open) {
			return true
		}
	}
	for _, k := range p.Sessions {
		if got, named := agents.Of(k, ""); named && got == id {
			return true
		}
	}
	return false
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	all, err := s.cfg.Client.Agents(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p := auth.FromContext(r.Context())
	out := AgentList{Agents: []*agents.Agent{}}
	for _, a := range all {
		if reachesAgent(p, a.ID) {
			out.Agents = append(out.Agents, a)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// agentID is the agent the path names, or answers 404 when the caller
// reaches none of its sessions (the same answer as for no such agent).
func agentID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if agents.ValidID(id) != nil || !reachesAgent(auth.FromContext(r.Context()), id) {
		writeProblem(w, r, newProblem(http.StatusNotFound, CodeNotFound, "no such agent"))
		return "", false
	}
	return id, true
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request) {
	id, ok := agentID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	a, err := s.cfg.Client.Agent(ctx, id)
	if err != nil {
		s.agentFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) putAgent(w http.ResponseWriter, r *http.Request) {
	id, ok := agentID(w, r)
	if !ok {
		return
	}
	var a agents.Agent
	if !decodeJSON(w, r, &a) {
		return
	}
	if a.ID == "" {
		a.ID = id
	}
	if a.ID != id {
		writeProblem(w, r, problemf(http.StatusBadRequest, CodeInvalidInput, "the body defines agent %.80q, the path names %q", a.ID, id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	if _, err := s.cfg.Client.PutAgent(ctx, &a); err != nil {
		s.agentFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, &a)
}

func (s *Server) deleteAgent(w http.ResponseWriter, r *http.Request) {
	id, ok := agentID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	if err := s.cfg.Client.DeleteAgent(ctx, id); err != nil {
		s.agentFail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// agentFail answers an agent operation's error: an invalid definition is
// 400 naming the field, a missing agent 404.
func (s *Server) agentFail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, agents.ErrInvalid):
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, strings.TrimPrefix(err.Error(), "agents: ")))
	case errors.Is(err, agentstore.ErrNotFound):
		writeProblem(w, r, newProblem(http.StatusNotFound, CodeNotFound, "no such agent"))
	default:
		s.fail(w, r, err)
	}
}
