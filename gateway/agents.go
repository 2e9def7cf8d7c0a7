package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
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
		{Method: "GET", Pattern: "/api/agents/{id}/files", Reach: route.Caller, Handler: h(s.listAgentFiles)},
		{Method: "GET", Pattern: "/api/agents/{id}/files/{path...}", Reach: route.Caller, Handler: h(s.getAgentFile)},
		{Method: "PUT", Pattern: "/api/agents/{id}/files/{path...}", Reach: route.Fleet, Handler: h(s.putAgentFile)},
		{Method: "DELETE", Pattern: "/api/agents/{id}/files/{path...}", Reach: route.Fleet, Handler: h(s.deleteAgentFile)},
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

// AgentFileList is GET /api/agents/{id}/files: the files of the agent's
// workspace, sorted by path.
type AgentFileList struct {
	Workspace string                `json:"workspace"`
	Files     []agentstore.FileInfo `json:"files"`
}

// agentWorkspace is the workspace of the agent the path names (its
// definition's, which several agents may share), or answers 404 when the
// caller reaches none of its sessions or it is not defined.
func (s *Server) agentWorkspace(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, ok := agentID(w, r)
	if !ok {
		return "", false
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	a, err := s.cfg.Client.Agent(ctx, id)
	if err != nil {
		s.agentFail(w, r, err)
		return "", false
	}
	return a.WorkspaceName(), true
}

// agentFilePath is the workspace file the path names, or answers 400
// saying why it is none (agents.ValidFilePath: relative, clean, no "..",
// bounded in length, elements of A-Z a-z 0-9 _ - . not starting with
// '.').
func agentFilePath(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.PathValue("path")
	if err := agents.ValidFilePath(p); err != nil {
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, strings.TrimPrefix(err.Error(), "agents: ")))
		return "", false
	}
	return p, true
}

func (s *Server) listAgentFiles(w http.ResponseWriter, r *http.Request) {
	ws, ok := s.agentWorkspace(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	files, err := s.cfg.Client.AgentFiles(ctx, ws)
	if err != nil {
		s.agentFail(w, r, err)
		return
	}
	out := AgentFileList{Workspace: ws, Files: files}
	if out.Files == nil {
		out.Files = []agentstore.FileInfo{}
	}
	writeJSON(w, http.StatusOK, out)
}

// getAgentFile answers the file's bytes as application/octet-stream
// (never a type a browser renders: a file is whatever its writer put
// there, the model included).
func (s *Server) getAgentFile(w http.ResponseWriter, r *http.Request) {
	ws, p, ok := s.agentFile(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	b, err := s.cfg.Client.AgentFile(ctx, ws, p)
	if err != nil {
		s.agentFileFail(w, r, p, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("ETag", strconv.Quote(agentstore.Digest(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// putAgentFile stores the body, as it is, as the file's new version: at
// most agents.MaxFileBytes, whatever its content type.
func (s *Server) putAgentFile(w http.ResponseWriter, r *http.Request) {
	ws, p, ok := s.agentFile(w, r)
	if !ok {
		return
	}
	if r.ContentLength > agents.MaxFileBytes {
		writeProblem(w, r, fileTooLarge(p))
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, agents.MaxFileBytes+1))
	if err != nil {
		writeProblem(w, r, problemOf(err))
		return
	}
	if len(b) > agents.MaxFileBytes {
		writeProblem(w, r, fileTooLarge(p))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	fi, err := s.cfg.Client.PutAgentFile(ctx, ws, p, b)
	if err != nil {
		s.agentFileFail(w, r, p, err)
		return
	}
	writeJSON(w, http.StatusOK, fi)
}

func (s *Server) deleteAgentFile(w http.ResponseWriter, r *http.Request) {
	ws, p, ok := s.agentFile(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	if err := s.cfg.Client.DeleteAgentFile(ctx, ws, p); err != nil {
		s.agentFileFail(w, r, p, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func fileTooLarge(p string) *Problem {
	return problemf(http.StatusRequestEntityTooLarge, CodeTooLarge, "file %s is over the limit of %d bytes of a workspace file", p, agents.MaxFileBytes)
}

// agentFileFail answers a workspace file operation's error: no such file
// 404, a full object store 507 naming the worker's limit, an invalid file
// 400.
func (s *Server) agentFileFail(w http.ResponseWriter, r *http.Request, p string, err error) {
	switch {
	case errors.Is(err, agentstore.ErrNotFound):
		writeProblem(w, r, problemf(http.StatusNotFound, CodeNotFound, "the workspace has no file %s", p))
	case errors.Is(err, agentstore.ErrFull):
		writeProblem(w, r, newProblem(http.StatusInsufficientStorage, CodeTooLarge,
			fmt.Sprintf("the agents' workspace files are at their byte limit (the object store agent-files, the worker's --max-agent-files-bytes): %s was not stored; remove files first", p)))
	default:
		s.agentFail(w, r, err)
	}
}

// agentFile is the workspace and the file path a file route names, or
// false once it answered why not (no such agent for the caller, a bad
// path).
func (s *Server) agentFile(w http.ResponseWriter, r *http.Request) (ws, p string, ok bool) {
	if ws, ok = s.agentWorkspace(w, r); !ok {
		return "", "", false
	}
	if p, ok = agentFilePath(w, r); !ok {
		return "", "", false
	}
	return ws, p, true
}
