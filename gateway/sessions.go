package gateway

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/route"
)

// Waits of the native API.
const (
	sendTimeout     = 90 * time.Second // Send retries a passing failure for up to a minute
	applyWait       = 30 * time.Second // settings and stop: how long a request waits to say the change applied
	resultWaitMax   = 10 * time.Minute
	resultWaitDef   = 30 * time.Second
	readTimeout     = 30 * time.Second // history, settings, backlog, listings
	readyProbeKey   = "lanefleet:gateway:readyz"
	sessionsPageMax = admin.LimitMax
)

// nativeRoutes are the gateway's own routes: health, metrics, the OpenAPI
// document and the native session API.
func (s *Server) nativeRoutes() []route.Route {
	h := func(f http.HandlerFunc) http.Handler { return f }
	return append([]route.Route{
		{Method: "GET", Pattern: "/healthz", Reach: route.Public, Handler: h(s.healthz)},
		{Method: "GET", Pattern: "/readyz", Reach: route.Public, Handler: h(s.readyz)},
		{Method: "GET", Pattern: "/openapi.json", Reach: route.Public, Handler: h(serveOpenAPI)},
		{Method: "GET", Pattern: "/metrics", Reach: route.Fleet, Handler: s.metrics.handler()},
		{Method: "GET", Pattern: "/api/me", Reach: route.Caller, Handler: h(s.me)},
		// MCP's streamable HTTP (stateless: POST only; GET and DELETE
		// are 405): each tool checks the session it names, as the
		// session routes do.
		{Method: "POST", Pattern: "/mcp", Reach: route.Caller, Handler: s.mcp},
		{Method: "GET", Pattern: "/api/sessions", Reach: route.Caller, Handler: h(s.listSessions)},
		{Method: "POST", Pattern: "/api/sessions/{key}/messages", Reach: route.SessionWrite, Handler: h(s.send)},
		{Method: "GET", Pattern: "/api/sessions/{key}/runs", Reach: route.Session, Handler: h(s.listRuns)},
		{Method: "GET", Pattern: "/api/sessions/{key}/runs/{run}", Reach: route.Session, Handler: h(s.runResult)},
		{Method: "GET", Pattern: "/api/sessions/{key}/runs/{run}/events", Reach: route.Session, Handler: h(s.runEvents)},
		{Method: "GET", Pattern: "/api/sessions/{key}/history", Reach: route.Session, Handler: h(s.history)},
		{Method: "GET", Pattern: "/api/sessions/{key}/settings", Reach: route.Session, Handler: h(s.getSettings)},
		{Method: "PATCH", Pattern: "/api/sessions/{key}/settings", Reach: route.SessionWrite, Handler: h(s.patchSettings)},
		{Method: "DELETE", Pattern: "/api/sessions/{key}/settings", Reach: route.SessionWrite, Handler: h(s.resetSettings)},
		{Method: "POST", Pattern: "/api/sessions/{key}/stop", Reach: route.SessionWrite, Handler: h(s.stop)},
		{Method: "GET", Pattern: "/api/sessions/{key}/approvals", Reach: route.Session, Handler: h(s.approvals)},
		{Method: "POST", Pattern: "/api/sessions/{key}/approvals/{call}", Reach: route.SessionWrite, Handler: h(s.decide)},
		{Method: "GET", Pattern: "/api/sessions/{key}/backlog", Reach: route.Session, Handler: h(s.backlog)},
		{Method: "GET", Pattern: "/api/runs", Reach: route.Caller, Handler: h(s.activeRuns)},
		{Method: "GET", Pattern: "/api/approvals", Reach: route.Caller, Handler: h(s.listApprovals)},
		{Method: "GET", Pattern: "/api/fleet", Reach: route.Fleet, Handler: h(s.fleet)},
		{Method: "GET", Pattern: "/api/fleet/events", Reach: route.Fleet, Handler: h(s.fleetEvents)},
		{Method: "GET", Pattern: "/api/auth-profiles", Reach: route.Fleet, Handler: h(s.listAuthProfiles)},
		{Method: "POST", Pattern: "/api/auth-profiles/{id}/reset", Reach: route.Fleet, Handler: h(s.resetAuthProfile)},
		{Method: "DELETE", Pattern: "/api/sessions/{key}", Reach: route.Fleet, Handler: h(s.forget)},
		{Method: "GET", Pattern: "/api/dead-letters", Reach: route.Fleet, Handler: h(s.deadLetters)},
		{Method: "GET", Pattern: "/api/dead-letters/{seq}", Reach: route.Fleet, Handler: h(s.deadLetter)},
		{Method: "POST", Pattern: "/api/dead-letters/replay", Reach: route.Fleet, Handler: h(s.replayDead)},
		{Method: "POST", Pattern: "/api/dead-letters/purge", Reach: route.Fleet, Handler: h(s.purgeDead)},
	}, append(s.scheduleRoutes(), s.agentRoutes()...)...)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	var err error
	if s.cfg.Ready != nil {
		err = s.cfg.Ready(ctx)
	} else {
		_, err = s.cfg.Client.Settings(ctx, readyProbeKey)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready: "+problemOf(err).Detail+"\n")
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// session returns the session the path names, or answers 404 when the
// caller may not reach it (the same answer as for a key nobody uses, so
// a caller learns nothing of other tenants' sessions).
func session(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.PathValue("key")
	p := auth.FromContext(r.Context())
	if !p.AllowsSession(key) {
		writeProblem(w, r, newProblem(http.StatusNotFound, CodeNotFound, "no such session"))
		return "", false
	}
	if err := events.ValidateKey(key); err != nil {
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "session key: "+err.Error()))
		return "", false
	}
	return key, true
}

// decodeJSON reads r's JSON body into v: 415 for another content type,
// 413 past the body limit, 400 for JSON that does not decode into v
// (unknown fields included) or has trailing data.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		writeProblem(w, r, problemf(http.StatusUnsupportedMediaType, CodeMediaType, "send the body as application/json, not %q", ct))
		return false
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON value")
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("data after the JSON value")
		}
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProblem(w, r, problemOf(err))
			return false
		}
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeBadJSON, "the body is not valid JSON for this route: "+jsonReason(err)))
		return false
	}
	return true
}

// jsonReason says what is wrong with a body, without echoing it.
func jsonReason(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("%s: want %s", te.Field, te.Type)
	case errors.Is(err, io.EOF):
		return "empty body"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the body ends early"
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers err as a problem, logging what the caller is not told.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	p := problemOf(err)
	if p.Status >= 500 {
		s.log.Warn().Err(err).Str("path", r.URL.Path).Msg("gateway: fleet request failed")
	}
	writeProblem(w, r, p)
}

// SendRequest is the body of POST /api/sessions/{key}/messages: a message
// and every inbound option.
type SendRequest struct {
	Text        string              `json:"text,omitempty"`
	Images      []events.Image      `json:"images,omitempty"`
	Mode        string              `json:"mode,omitempty"`
	Model       string              `json:"model,omitempty"`
	Thinking    string              `json:"thinking,omitempty"`
	AuthProfile string              `json:"authProfile,omitempty"`
	Heartbeat   bool                `json:"heartbeat,omitempty"`
	Tools       []events.ClientTool `json:"tools,omitempty"`
	ToolResults []events.ToolResult `json:"toolResults,omitempty"`
	// MessageID de-duplicates the message (as the Idempotency-Key header
	// does): sent again with the same id, it is stored once and the same
	// run answers.
	MessageID string `json:"messageId,omitempty"`
	// Stream answers with the run's events (server-sent events) instead
	// of the run's id; so does a request that accepts text/event-stream.
	Stream bool `json:"stream,omitempty"`
}

// SendReply is the answer to a message sent.
type SendReply struct {
	Session   string `json:"session"`
	RunID     string `json:"runId"`
	MessageID string `json:"messageId,omitempty"`
	// Events is the run's event stream's path.
	Events string `json:"events"`
}

// runPath is the path of a run's resource.
func runPath(key, run string) string {
	return "/api/sessions/" + url.PathEscape(key) + "/runs/" + url.PathEscape(run)
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	var req SendRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		req.Stream = true // what an EventSource-style client asks for
	}
	p := auth.FromContext(r.Context())
	if !p.AllowsModel(req.Model) {
		writeProblem(w, r, problemf(http.StatusForbidden, CodeForbidden, "this token may not use model %q", req.Model))
		return
	}
	id := req.MessageID
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		if id != "" && id != k {
			writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "Idempotency-Key and messageId differ"))
			return
		}
		id = k
	}
	in := events.Inbound{ID: id, Text: req.Text, Images: req.Images, Mode: req.Mode, Model: req.Model, Thinking: req.Thinking,
		AuthProfile: req.AuthProfile, Heartbeat: req.Heartbeat, Tools: req.Tools, ToolResults: req.ToolResults}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	opts := []lanefleet.SendOption{lanefleet.WithMode(req.Mode), lanefleet.WithModel(req.Model), lanefleet.WithThinking(req.Thinking),
		lanefleet.WithAuthProfile(req.AuthProfile), lanefleet.WithMessageID(id)}
	if req.Heartbeat {
		opts = append(opts, lanefleet.WithHeartbeat())
	}
	for _, im := range req.Images {
		// The client takes raw bytes; the wire carries base64 again.
		data, err := decodeBase64(im.Data)
		if err != nil {
			writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "images: data must be base64"))
			return
		}
		opts = append(opts, lanefleet.WithImage(im.MimeType, data))
	}
	if len(req.Tools) > 0 {
		opts = append(opts, lanefleet.WithTools(req.Tools...))
	}
	if len(req.ToolResults) > 0 {
		opts = append(opts, lanefleet.WithToolResults(req.ToolResults...))
	}
	if !req.Stream {
		opts = append(opts, lanefleet.WithoutFollow())
	}
	run, err := s.sendTo(r, key, req.Text, opts...)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Stream {
		s.streamRun(w, r, run, 0)
		return
	}
	path := runPath(key, run.ID)
	w.Header().Set("Location", path)
	writeJSON(w, http.StatusAccepted, SendReply{Session: key, RunID: run.ID, MessageID: id, Events: path + "/events"})
}

// sendTo sends through the client. A client that disconnects while the
// message is being published does not cancel the publish: the message
// goes out once, or the gateway knows it did not.
func (s *Server) sendTo(r *http.Request, key, text string, opts ...lanefleet.SendOption) (*lanefleet.Run, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), sendTimeout)
	defer cancel()
	return s.cfg.Client.Send(ctx, key, text, opts...)
}

// runOf returns the run the path names; a run id is a number.
func runOf(w http.ResponseWriter, r *http.Request, s *Server, key string) (*lanefleet.Run, bool) {
	id := r.PathValue("run")
	if n, err := strconv.ParseUint(id, 10, 64); err != nil || n == 0 || strconv.FormatUint(n, 10) != id {
		writeProblem(w, r, newProblem(http.StatusNotFound, CodeUnknownRun, "a run id is a positive number"))
		return nil, false
	}
	return s.cfg.Client.Run(key, id), true
}

func (s *Server) runEvents(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	run, ok := runOf(w, r, s, key)
	if !ok {
		return
	}
	after, prob := resumeAfter(r)
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	s.streamRun(w, r, run, after)
}

// RunReply is a run's state: its result once it ended.
type RunReply struct {
	Session string         `json:"session"`
	RunID   string         `json:"runId"`
	Status  string         `json:"status"` // "done", or "running" when it did not end within the wait
	Result  *events.Result `json:"result,omitempty"`
	Events  string         `json:"events"`
}

func (s *Server) runResult(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	run, ok := runOf(w, r, s, key)
	if !ok {
		return
	}
	wait := resultWaitDef
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "wait must be a duration such as 30s"))
			return
		}
		wait = min(d, resultWaitMax)
	}
	ctx, cancel := context.WithTimeout(r.Context(), max(wait, 2*time.Second))
	defer cancel()
	rep := RunReply{Session: key, RunID: run.ID, Status: "running", Events: runPath(key, run.ID) + "/events"}
	res, err := finalOf(ctx, run)
	switch {
	case err == nil:
		rep.Status, rep.Result = "done", res
		writeJSON(w, http.StatusOK, rep)
	case ctx.Err() != nil && r.Context().Err() == nil:
		writeJSON(w, http.StatusAccepted, rep)
	default:
		s.fail(w, r, err)
	}
}

// maxMergeHops bounds the runs finalOf follows from one to the next.
const maxMergeHops = 4

// finalOf follows run to its final event and returns its result. A
// message merged into another run (collect mode, or a duplicate of an
// earlier message id) ends pointing at that run: its result is that
// run's, with MergedInto saying so.
func finalOf(ctx context.Context, run *lanefleet.Run) (*events.Result, error) {
	var merged string
	for hop := 0; ; hop++ {
		var final *events.Event
		for ev, err := range run.Events(ctx) {
			if err != nil {
				var de *events.DecodeError
				if errors.As(err, &de) {
					continue
				}
				return nil, err
			}
			if ev.Terminal() {
				final = ev
			}
		}
		if final == nil {
			return nil, fmt.Errorf("gateway: run %s: events ended without a final event", run.ID)
		}
		res := final.Data.Result
		if res == nil {
			res = &events.Result{}
		}
		if into := res.Meta.MergedInto; into != "" && into != run.ID && hop < maxMergeHops {
			merged = cmp.Or(merged, into)
			run = run.Follow(into)
			continue
		}
		if merged != "" {
			cp := *res
			cp.Meta.MergedInto = merged
			res = &cp
		}
		return res, nil
	}
}

// readCtx bounds a read of the fleet.
func readCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), readTimeout)
}

func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	h, err := s.cfg.Client.History(ctx, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"session": key, "entries": h})
}

// SettingsReply is a session's stored settings and state.
type SettingsReply struct {
	Session    string                `json:"session"`
	Queue      *events.QueueSettings `json:"queue,omitempty"`
	Run        *events.RunSettings   `json:"run,omitempty"`
	State      *events.SessionState  `json:"state,omitempty"`
	Unreadable string                `json:"unreadable,omitempty"`
}

func (s *Server) getSettings(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	st, err := s.cfg.Client.Settings(ctx, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep := SettingsReply{Session: key, Run: st.Run, State: st.State, Unreadable: st.Unreadable}
	if q := st.Queue.Wire(); *q != (events.QueueSettings{}) {
		rep.Queue = q
	}
	writeJSON(w, http.StatusOK, rep)
}

// SettingsChange is the body of PATCH /api/sessions/{key}/settings.
type SettingsChange struct {
	Queue *events.QueueSettings `json:"queue,omitempty"`
	Run   *events.RunSettings   `json:"run,omitempty"`
	// Reset clears the stored settings first, in the same change.
	Reset bool `json:"reset,omitempty"`
}

// AppliedReply says a change sent through the session's lane: applied
// (Text describes the settings in force, or what a stop stopped), or
// still waiting behind the session's earlier messages.
type AppliedReply struct {
	Session string `json:"session"`
	RunID   string `json:"runId"`
	Applied bool   `json:"applied"`
	Text    string `json:"text,omitempty"`
	Events  string `json:"events"`
}

func (s *Server) patchSettings(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	var req SettingsChange
	if !decodeJSON(w, r, &req) {
		return
	}
	if req.Run != nil && !auth.FromContext(r.Context()).AllowsModel(req.Run.Model) {
		writeProblem(w, r, problemf(http.StatusForbidden, CodeForbidden, "this token may not use model %q", req.Run.Model))
		return
	}
	ch := lanefleet.SettingsChange{Run: req.Run, Reset: req.Reset}
	if req.Queue != nil {
		if err := req.Queue.Validate(); err != nil {
			writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "queue: "+err.Error()))
			return
		}
		q := lanefleet.QueueSettingsFromWire(req.Queue)
		ch.Queue = &q
	}
	if req.Run != nil {
		if err := req.Run.Validate(); err != nil {
			writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "run: "+err.Error()))
			return
		}
	}
	if ch.Queue == nil && ch.Run == nil && !ch.Reset {
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "the change sets nothing (queue, run or reset)"))
		return
	}
	s.steer(w, r, key, func(ctx context.Context) (*lanefleet.Run, error) { return s.cfg.Client.SetSettings(ctx, key, ch) })
}

func (s *Server) resetSettings(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	s.steer(w, r, key, func(ctx context.Context) (*lanefleet.Run, error) { return s.cfg.Client.ResetSettings(ctx, key) })
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	s.steer(w, r, key, func(ctx context.Context) (*lanefleet.Run, error) { return s.cfg.Client.Stop(ctx, key) })
}

// steer sends a settings or stop message through the session's lane with
// send (which the client's leaving does not cancel) and answers as applied
// does.
func (s *Server) steer(w http.ResponseWriter, r *http.Request, key string, send func(ctx context.Context) (*lanefleet.Run, error)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), sendTimeout)
	defer cancel()
	run, err := send(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.applied(w, r, key, run)
}

// applied waits a while for a settings or stop message's run and answers
// 200 with its result's text, 202 when it has not run yet, or the error
// the fleet refused it with.
func (s *Server) applied(w http.ResponseWriter, r *http.Request, key string, run *lanefleet.Run) {
	rep := AppliedReply{Session: key, RunID: run.ID, Events: runPath(key, run.ID) + "/events"}
	ctx, cancel := context.WithTimeout(r.Context(), applyWait)
	defer cancel()
	res, err := run.Wait(ctx)
	var re *lanefleet.RunError
	switch {
	case errors.As(err, &re):
		writeProblem(w, r, newProblem(http.StatusUnprocessableEntity, re.Kind, re.Message))
	case err != nil && ctx.Err() != nil:
		writeJSON(w, http.StatusAccepted, rep)
	case err != nil:
		s.fail(w, r, err)
	default:
		rep.Applied = true
		for _, p := range res.Payloads {
			rep.Text += p.Text
		}
		writeJSON(w, http.StatusOK, rep)
	}
}

func (s *Server) approvals(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	st, err := s.cfg.Client.Settings(ctx, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	calls := []events.ApprovalCall{}
	if st.State != nil && st.State.Approvals != nil {
		calls = st.State.Approvals
	}
	writeJSON(w, http.StatusOK, map[string]any{"session": key, "approvals": calls})
}

// Decision is the body of POST /api/sessions/{key}/approvals/{call}.
type Decision struct {
	// Decision is "approve" (the call runs) or "deny" (it does not).
	Decision string `json:"decision"`
	// Stream answers with the run's events, as a send does.
	Stream bool `json:"stream,omitempty"`
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	var req Decision
	if !decodeJSON(w, r, &req) {
		return
	}
	if req.Decision != "approve" && req.Decision != "deny" {
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, `decision must be "approve" or "deny"`))
		return
	}
	call := r.PathValue("call")
	ctx, cancel := readCtx(r)
	defer cancel()
	st, err := s.cfg.Client.Settings(ctx, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if st.State == nil || !slices.ContainsFunc(st.State.Approvals, func(a events.ApprovalCall) bool { return a.ID == call }) {
		writeProblem(w, r, newProblem(http.StatusNotFound, CodeNotFound, "no call of the session waits for approval with that id"))
		return
	}
	opts := []lanefleet.SendOption{lanefleet.WithToolResults(events.ToolResult{ToolCallID: call, Text: req.Decision}),
		lanefleet.WithMessageID(r.Header.Get("Idempotency-Key"))}
	if !req.Stream {
		opts = append(opts, lanefleet.WithoutFollow())
	}
	run, err := s.sendTo(r, key, "", opts...)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Stream {
		s.streamRun(w, r, run, 0)
		return
	}
	path := runPath(key, run.ID)
	w.Header().Set("Location", path)
	writeJSON(w, http.StatusAccepted, SendReply{Session: key, RunID: run.ID, Events: path + "/events"})
}

func (s *Server) backlog(w http.ResponseWriter, r *http.Request) {
	key, ok := session(w, r)
	if !ok {
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	b, err := s.cfg.Client.Backlog(ctx, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// intParam reads a non-negative integer query parameter (def when absent).
func intParam(r *http.Request, name string, def, maxV int) (int, *Problem) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, problemf(http.StatusBadRequest, CodeInvalidInput, "%s must be a non-negative number", name)
	}
	return min(n, maxV), nil
}

// SessionItem is one session of GET /api/sessions: the listing's fields
// (admin.Session) and the console's.
type SessionItem struct {
	admin.Session
	// Agent is the agent id of an "agent:<id>:…" key, else "".
	Agent        string    `json:"agent"`
	LastActivity time.Time `json:"lastActivity"`
	// State is idle, running or queued.
	State   string  `json:"state"`
	CostUSD float64 `json:"costUsd"`
	Turns   int64   `json:"turns"`
}

// maxQuery bounds GET /api/sessions' q; maxCursor its cursor.
const (
	maxQuery  = 256
	maxCursor = 512
)

// agentOf returns the agent id an "agent:<id>:…" session key names.
func agentOf(key string) string {
	rest, ok := strings.CutPrefix(key, "agent:")
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return id
}

// scopeOf is the sessions p reaches, as the fleet's listings take them
// (nil: every session).
func scopeOf(p *auth.Principal) *admin.Scope { return admin.ScopeOf(p.Prefixes, p.Sessions) }

// listSessions lists the caller's sessions with recent activity, most
// recent first, a page at a time: limit, and cursor (the previous page's
// next, an opaque string; "" on the last page) or offset (next is then
// the next page's offset, a number, as before cursors); q keeps the keys
// that contain it, case-insensitively. The fleet filters and pages, and
// reads the state of the page's sessions only. total is left out when the
// fleet would have to read every session to count (a query, or a scope
// other than single keys), and partial says a page of a
// query stopped after reading admin.IndexScanMax sessions: next goes on.
func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	qv := r.URL.Query()
	limit, prob := intParam(r, "limit", admin.LimitDefault, sessionsPageMax)
	if prob == nil && limit == 0 {
		limit = admin.LimitDefault
	}
	offset, prob2 := intParam(r, "offset", 0, 1<<20)
	if prob = cmpProblem(prob, prob2); prob != nil {
		writeProblem(w, r, prob)
		return
	}
	q := admin.SessionsRequest{Limit: limit, Offset: offset, Scope: scopeOf(p), Query: qv.Get("q"), State: true}
	byOffset := qv.Has("offset")
	switch c := qv.Get("cursor"); {
	case len(q.Query) > maxQuery:
		writeProblem(w, r, problemf(http.StatusBadRequest, CodeInvalidInput, "q is longer than %d bytes", maxQuery))
		return
	case c != "" && byOffset:
		writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "give cursor or offset, not both"))
		return
	case c != "":
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if len(c) > maxCursor || err != nil || len(raw) == 0 {
			writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "cursor is not a listing's next"))
			return
		}
		q.After = string(raw)
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	rep, err := s.cfg.Client.SessionsPage(ctx, q)
	if prob := badRequestOf(err); prob != nil {
		writeProblem(w, r, prob)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	items := make([]SessionItem, 0, len(rep.Sessions))
	for _, ss := range rep.Sessions {
		if !p.AllowsSession(ss.Key) {
			continue // the fleet filtered by the same scope: never reached
		}
		it := SessionItem{Agent: agentOf(ss.Key), LastActivity: time.UnixMilli(ss.LastActivity).UTC(), State: ss.State,
			CostUSD: ss.CostUSD, Turns: ss.Turns}
		ss.State, ss.CostUSD, ss.Turns = "", 0, 0
		it.Session = ss
		items = append(items, it)
	}
	out := map[string]any{"sessions": items}
	if rep.Total >= 0 {
		out["total"] = rep.Total // not counted when counting would read every session
	}
	if rep.Partial {
		out["partial"] = true
	}
	switch {
	case byOffset && rep.Next != "":
		out["next"] = offset + len(rep.Sessions)
	case byOffset:
	default:
		out["next"] = ""
		if rep.Next != "" {
			out["next"] = base64.RawURLEncoding.EncodeToString([]byte(rep.Next))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// maxApprovals bounds GET /api/approvals.
const maxApprovals = admin.LimitMax

// ApprovalItem is one call waiting for approval in GET /api/approvals.
type ApprovalItem struct {
	Session string `json:"session"`
	Run     string `json:"run"`
	Call    string `json:"call"`
	Tool    string `json:"tool"`
	// Arguments are the call's arguments as JSON, or the text the model
	// wrote when it is not JSON.
	Arguments   any       `json:"arguments"`
	RequestedAt time.Time `json:"requestedAt"`
}

// listApprovals lists the calls waiting for approval in the caller's
// sessions, newest first (limit, default and at most 1000).
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	limit, prob := intParam(r, "limit", maxApprovals, maxApprovals)
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	rep, err := s.cfg.Client.Approvals(ctx, admin.ApprovalsRequest{Scope: scopeOf(p), Limit: max(limit, 1)})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	items := make([]ApprovalItem, 0, len(rep.Approvals))
	for _, a := range rep.Approvals {
		if !p.AllowsSession(a.Session) {
			continue
		}
		var args any = a.Arguments
		if json.Valid([]byte(a.Arguments)) {
			args = json.RawMessage(a.Arguments)
		}
		items = append(items, ApprovalItem{Session: a.Session, Run: a.Run, Call: a.Call, Tool: a.Tool, Arguments: args,
			RequestedAt: time.UnixMilli(a.RequestedAt).UTC()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": items, "more": rep.More})
}

func cmpProblem(a, b *Problem) *Problem {
	if a != nil {
		return a
	}
	return b
}

// activeRuns lists the runs being run now in the caller's sessions.
func (s *Server) activeRuns(w http.ResponseWriter, r *http.Request) {
	p := auth.FromContext(r.Context())
	ctx, cancel := readCtx(r)
	defer cancel()
	runs, err := s.cfg.Client.ActiveRuns(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	mine := make([]lanefleet.ActiveRun, 0, len(runs))
	for _, ar := range runs {
		if p.AllowsSession(ar.Session) {
			mine = append(mine, ar)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": mine})
}

func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) {
	limit, prob := intParam(r, "limit", 0, admin.LimitMax)
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	q := admin.DeadListRequest{Reason: r.URL.Query().Get("reason"), Limit: limit}
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeProblem(w, r, newProblem(http.StatusBadRequest, CodeInvalidInput, "after must be a dead letter's seq"))
			return
		}
		q.After = n
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	rep, err := s.cfg.Client.DeadLetters(ctx, q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rep.Letters == nil {
		rep.Letters = []admin.DeadLetter{}
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) deadLetter(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		writeProblem(w, r, newProblem(http.StatusNotFound, CodeNotFound, "a dead letter's id is its seq, a positive number"))
		return
	}
	answer(s, w, r, func(ctx context.Context) (admin.DeadLetter, error) { return s.cfg.Client.DeadLetter(ctx, seq) })
}

func (s *Server) replayDead(w http.ResponseWriter, r *http.Request) {
	var sel admin.DeadSelect
	if !decodeJSON(w, r, &sel) {
		return
	}
	answer(s, w, r, func(ctx context.Context) (admin.DeadReplayReply, error) {
		return s.cfg.Client.ReplayDeadLetters(ctx, sel)
	})
}

func (s *Server) purgeDead(w http.ResponseWriter, r *http.Request) {
	var sel admin.DeadSelect
	if !decodeJSON(w, r, &sel) {
		return
	}
	answer(s, w, r, func(ctx context.Context) (admin.DeadPurgeReply, error) {
		return s.cfg.Client.PurgeDeadLetters(ctx, sel)
	})
}

// answer calls the fleet with the request's read timeout and writes what
// it answered as JSON, or its error as a problem.
func answer[T any](s *Server, w http.ResponseWriter, r *http.Request, call func(ctx context.Context) (T, error)) {
	ctx, cancel := readCtx(r)
	defer cancel()
	v, err := call(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
