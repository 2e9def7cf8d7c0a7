package gateway

import (
	"net/http"

	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// RunsReply is a page of a session's runs (GET
// /api/sessions/{key}/runs), newest first: those whose events are still
// stored, so each one's timeline can be replayed.
type RunsReply struct {
	Session string                  `json:"session"`
	Runs    []sessionsvc.RunSummary `json:"runs"`
	// Total counts the session's runs with stored events.
	Total int `json:"total"`
	// Next is the cursor of the next page, "" on the last.
	Next string `json:"next"`
}

// maxRunsCursor bounds the runs listing's cursor (a run id).
const maxRunsCursor = 20

// listRuns lists a page of a session's runs: limit (default 20, at most
// 100) and cursor (the previous page's next).
func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	limit, prob := intParam(r, "limit", sessionsvc.RunsLimitDefault, sessionsvc.RunsLimitMax)
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	cursor := r.URL.Query().Get("cursor")
	if len(cursor) > maxRunsCursor {
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "cursor is not a listing's next"))
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	rep, err := s.cfg.Client.Runs(ctx, key, sessionsvc.RunsRequest{Limit: max(limit, 1), Before: cursor})
	if prob := badRequestOf(err); prob != nil {
		writeProblem(w, r, prob)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rep.Runs == nil {
		rep.Runs = []sessionsvc.RunSummary{}
	}
	writeJSON(w, http.StatusOK, RunsReply{Session: key, Runs: rep.Runs, Total: rep.Total, Next: rep.Next})
}
