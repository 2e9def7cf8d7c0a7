package mcpserver

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/message"
)

// The tools' names.
const (
	ToolSend     = "send_message"
	ToolRun      = "get_run"
	ToolHistory  = "read_history"
	ToolSessions = "list_sessions"
)

// Bounds of the tools' arguments and results.
const (
	// MaxTextBytes is the longest message send_message takes: the
	// fleet's own bound.
	MaxTextBytes = events.MaxTextBytes
	// WaitDefault is how long send_message waits for the reply unless
	// told; get_run waits RunWaitDefault. Neither waits past WaitMax.
	WaitDefault    = 2 * time.Minute
	RunWaitDefault = 30 * time.Second
	WaitMax        = 10 * time.Minute
	// HistoryDefault and HistoryMax are read_history's page sizes, in
	// messages; a page's texts together stay under HistoryPageBytes, each
	// under HistoryTextBytes (longer ones are cut, and say so).
	HistoryDefault   = 20
	HistoryMax       = 100
	HistoryTextBytes = 16 << 10
	HistoryPageBytes = 256 << 10
	// SessionsDefault and SessionsMax are list_sessions' page sizes.
	SessionsDefault = 50
	SessionsMax     = 200

	maxKeyBytes    = 256 // events.ValidateKey's bound
	maxIDBytes     = 128 // a message id
	maxModelBytes  = 256
	maxQueryBytes  = 256
	maxCursorBytes = 512
	maxMergeHops   = 4                // runs a wait follows from a merged message to the run that answered it
	sendTimeout    = 90 * time.Second // Send retries a passing failure for up to a minute
	readTimeout    = 30 * time.Second // history and listings
)

// Run statuses (RunResult.Status).
const (
	StatusDone    = "done"    // the run ended with a reply
	StatusFailed  = "failed"  // the run ended in error (RunResult.Error)
	StatusRunning = "running" // it did not end within the wait: get_run waits again
)

// SendArgs are send_message's arguments.
type SendArgs struct {
	Session        string `json:"session" jsonschema:"the session's key (a conversation; a new key starts one)"`
	Text           string `json:"text" jsonschema:"the message"`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty" jsonschema:"how long to wait for the reply (default 120, at most 600); the run goes on after it, and get_run waits again"`
	MessageID      string `json:"messageId,omitempty" jsonschema:"de-duplicates the message: sent again with the same id, it is stored once and the same run answers"`
	Model          string `json:"model,omitempty" jsonschema:"the model to run this turn on (a fleet model ref or alias); the session's own by default"`
}

// RunArgs are get_run's arguments.
type RunArgs struct {
	Session     string `json:"session" jsonschema:"the session's key"`
	RunID       string `json:"runId" jsonschema:"the run's id, as send_message returned it"`
	WaitSeconds *int   `json:"waitSeconds,omitempty" jsonschema:"how long to wait for the run to end (default 30, at most 600; 0 answers at once)"`
}

// RunResult is what send_message and get_run answer.
type RunResult struct {
	Session string `json:"session"`
	RunID   string `json:"runId"`
	// Status is done, failed or running.
	Status string `json:"status"`
	// Reply is the run's reply text, once done.
	Reply string `json:"reply,omitempty"`
	// Error says why a failed run failed.
	Error *RunFailure `json:"error,omitempty"`
	// MergedInto names the run that answered this message with others
	// (collect mode, or a message id sent again).
	MergedInto string `json:"mergedInto,omitempty"`
}

// RunFailure is a failed run's error.
type RunFailure struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// HistoryArgs are read_history's arguments.
type HistoryArgs struct {
	Session string `json:"session" jsonschema:"the session's key"`
	Limit   int    `json:"limit,omitempty" jsonschema:"the most messages to return, newest last (default 20, at most 100)"`
	Before  *int   `json:"before,omitempty" jsonschema:"return the messages before this index (a page's next); the newest by default"`
}

// HistoryPage is a page of a session's conversation, oldest first.
type HistoryPage struct {
	Session  string         `json:"session"`
	Messages []HistoryEntry `json:"messages"`
	// Total counts the session's messages.
	Total int `json:"total"`
	// Next is the before of the page of older messages; absent on the
	// first page of the conversation.
	Next *int `json:"next,omitempty"`
}

// HistoryEntry is one message of a conversation.
type HistoryEntry struct {
	// Index is the message's place in the conversation, from 0.
	Index int `json:"index"`
	// Role is user, assistant or toolResult.
	Role string `json:"role"`
	Text string `json:"text,omitempty"`
	// ToolCalls are the tools an assistant message called.
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// ToolName is the tool a toolResult answers.
	ToolName  string    `json:"toolName,omitempty"`
	IsError   bool      `json:"isError,omitempty"`
	Images    int       `json:"images,omitempty"`
	Timestamp time.Time `json:"timestamp,omitzero"`
	// Truncated says Text was cut to HistoryTextBytes.
	Truncated bool `json:"truncated,omitempty"`
}

// ToolCall is a call an assistant message made.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// SessionsArgs are list_sessions' arguments.
type SessionsArgs struct {
	Limit  int    `json:"limit,omitempty" jsonschema:"the most sessions to return (default 50, at most 200)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the previous page's next"`
	Query  string `json:"query,omitempty" jsonschema:"keep the sessions whose key contains this, case-insensitively"`
}

// SessionsPage lists sessions with recent activity, newest first.
type SessionsPage struct {
	Sessions []SessionItem `json:"sessions"`
	// Total counts the sessions found, before the page; -1 when the
	// fleet did not count them (a query, or a scope other than single
	// keys: counting would read every session).
	Total int `json:"total"`
	// Next continues the listing (cursor); "" on the last page.
	Next string `json:"next"`
}

// SessionItem is one session of a listing.
type SessionItem struct {
	Key          string    `json:"key"`
	LastActivity time.Time `json:"lastActivity"`
	// State is idle, running or queued.
	State   string  `json:"state,omitempty"`
	LastRun string  `json:"lastRun,omitempty"`
	Running string  `json:"running,omitempty"`
	Turns   int64   `json:"turns"`
	CostUSD float64 `json:"costUsd"`
}

// addTools adds the tools to m; send adds send_message.
func (s *Server) addTools(m *mcp.Server, send bool) {
	reads := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(false)}
	if send {
		mcp.AddTool(m, &mcp.Tool{Name: ToolSend, Title: "Send a message",
			Description: "Send a message to a Lanefleet session and wait for the agent's reply. " +
				"The reply's text streams as progress notifications when the call asks for progress. " +
				"A reply that takes longer than timeoutSeconds answers status running: get_run waits again.",
			InputSchema: schemaFor[SendArgs](map[string]bound{"session": {maxLen: maxKeyBytes}, "text": {minLen: 1, maxLen: MaxTextBytes},
				"timeoutSeconds": {min: 1, max: int(WaitMax / time.Second)}, "messageId": {maxLen: maxIDBytes}, "model": {maxLen: maxModelBytes}}),
			Annotations: &mcp.ToolAnnotations{DestructiveHint: new(false), OpenWorldHint: new(false)},
		}, s.send)
	}
	mcp.AddTool(m, &mcp.Tool{Name: ToolRun, Title: "Get a run",
		Description: "Wait for a run of a Lanefleet session (as send_message returned it) to end and return its reply, or say it still runs.",
		InputSchema: schemaFor[RunArgs](map[string]bound{"session": {maxLen: maxKeyBytes}, "runId": {minLen: 1, maxLen: 20},
			"waitSeconds": {min: 0, max: int(WaitMax / time.Second)}}),
		Annotations: reads,
	}, s.getRun)
	mcp.AddTool(m, &mcp.Tool{Name: ToolHistory, Title: "Read a session's history",
		Description: "Read a Lanefleet session's conversation, a page of messages at a time, newest last.",
		InputSchema: schemaFor[HistoryArgs](map[string]bound{"session": {maxLen: maxKeyBytes}, "limit": {min: 0, max: HistoryMax}, "before": {min: 0, max: 1 << 30}}),
		Annotations: reads,
	}, s.history)
	mcp.AddTool(m, &mcp.Tool{Name: ToolSessions, Title: "List sessions",
		Description: "List the Lanefleet sessions this caller may see, with recent activity first, a page at a time.",
		InputSchema: schemaFor[SessionsArgs](map[string]bound{"limit": {min: 0, max: SessionsMax}, "cursor": {maxLen: maxCursorBytes}, "query": {maxLen: maxQueryBytes}}),
		Annotations: reads,
	}, s.sessions)
}

// bound is a property's bounds in a tool's input schema: lengths for a
// string, values for a number (zero: none).
type bound struct{ minLen, maxLen, min, max int }

// schemaFor is T's input schema with the bounds set, so the SDK refuses
// arguments outside them before a handler runs (the handlers check again:
// a string's schema length counts characters, the fleet's bounds bytes).
func schemaFor[T any](bounds map[string]bound) *jsonschema.Schema {
	sc, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: schema of %T: %v", *new(T), err)) // a programming error: the types are ours
	}
	for name, b := range bounds {
		p := sc.Properties[name]
		if p == nil {
			panic(fmt.Sprintf("mcpserver: schema of %T has no property %q", *new(T), name))
		}
		if b.maxLen > 0 {
			p.MinLength, p.MaxLength = new(b.minLen), new(b.maxLen)
		} else {
			p.Minimum, p.Maximum = new(float64(b.min)), new(float64(b.max))
		}
	}
	return sc
}

// reach returns the caller if it may read session key (and send to it,
// with write), else the tool error that says why. As on the gateway's
// routes, the scope is checked before anything else.
func reach(ctx context.Context, key string, write bool) (*auth.Principal, error) {
	p := auth.FromContext(ctx)
	switch {
	case !p.CanRead():
		return nil, errors.New("this caller may not read sessions")
	case !p.AllowsSession(key):
		return nil, fmt.Errorf("session %q is not one this caller may reach (its token reaches %s)", key, scopeText(p))
	case write && !p.CanSend():
		return nil, errors.New("this caller may read sessions, not send to them")
	}
	if err := events.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	return p, nil
}

// scopeText describes the sessions p reaches, for an error.
func scopeText(p *auth.Principal) string {
	var parts []string
	for _, pre := range p.Prefixes {
		parts = append(parts, fmt.Sprintf("keys starting %q", pre))
	}
	switch n := len(p.Sessions); {
	case n == 1:
		parts = append(parts, fmt.Sprintf("the session %q", p.Sessions[0]))
	case n > 1:
		parts = append(parts, fmt.Sprintf("%d single sessions", n))
	}
	if len(parts) == 0 {
		return "no session"
	}
	return strings.Join(parts, " and ")
}

// seconds is a wait argument as a duration: def when absent, at most
// WaitMax.
func seconds(n *int, def time.Duration) time.Duration {
	if n == nil {
		return def
	}
	return min(time.Duration(max(*n, 0))*time.Second, WaitMax)
}

func (s *Server) send(ctx context.Context, req *mcp.CallToolRequest, in SendArgs) (*mcp.CallToolResult, RunResult, error) {
	p, err := reach(ctx, in.Session, true)
	if err != nil {
		return nil, RunResult{}, err
	}
	if !p.AllowsModel(in.Model) {
		return nil, RunResult{}, fmt.Errorf("this caller may not use model %q", in.Model)
	}
	if len(in.MessageID) > maxIDBytes {
		return nil, RunResult{}, fmt.Errorf("messageId is longer than %d bytes", maxIDBytes)
	}
	if err := (&events.Inbound{ID: in.MessageID, Text: in.Text, Model: in.Model}).Validate(); err != nil {
		return nil, RunResult{}, s.toolError(err)
	}
	wait := WaitDefault
	if in.TimeoutSeconds != 0 {
		wait = seconds(&in.TimeoutSeconds, WaitDefault)
	}
	// A caller that leaves while the message is published does not cancel
	// the publish: the message goes out once, or the caller is told it
	// did not.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
	defer cancel()
	run, err := s.client.Send(sctx, in.Session, in.Text, lanefleet.WithModel(in.Model), lanefleet.WithMessageID(in.MessageID))
	if err != nil {
		return nil, RunResult{}, s.toolError(err)
	}
	return s.await(ctx, req, run, wait)
}

func (s *Server) getRun(ctx context.Context, req *mcp.CallToolRequest, in RunArgs) (*mcp.CallToolResult, RunResult, error) {
	if _, err := reach(ctx, in.Session, false); err != nil {
		return nil, RunResult{}, err
	}
	if !isRunID(in.RunID) {
		return nil, RunResult{}, errors.New("runId is a run's id: a positive number, as send_message returned it")
	}
	return s.await(ctx, req, s.client.Run(in.Session, in.RunID), seconds(in.WaitSeconds, RunWaitDefault))
}

// isRunID reports whether id is a run id: a positive decimal number
// without leading zeros.
func isRunID(id string) bool {
	if id == "" || len(id) > 20 || id[0] == '0' {
		return false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// await follows run to its final event for at most wait and answers its
// reply, its failure, or that it still runs. The reply's text goes out as
// progress notifications while it streams, when the call asked for them.
// A message merged into another run answers with that run's reply.
func (s *Server) await(ctx context.Context, req *mcp.CallToolRequest, run *lanefleet.Run, wait time.Duration) (*mcp.CallToolResult, RunResult, error) {
	out := RunResult{Session: run.Session, RunID: run.ID, Status: StatusRunning}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	pr := newProgress(wctx, req)
	for hop := 0; ; hop++ {
		var final *events.Event
		run.OnCaughtUp(pr.flush)
		for ev, err := range run.Events(wctx) {
			if err != nil {
				var de *events.DecodeError
				if errors.As(err, &de) {
					continue // not an event of the run
				}
				if wctx.Err() != nil && ctx.Err() == nil {
					pr.flush()
					return running(out, wait), out, nil
				}
				return nil, RunResult{}, s.toolError(err)
			}
			switch {
			case ev.Stream == events.StreamAssistant:
				pr.add(ev.Data.Delta)
			case ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseRestart:
				pr.add("\n[the run started again]\n")
			case ev.Terminal():
				final = ev
			}
		}
		pr.flush()
		if final == nil {
			if wctx.Err() != nil && ctx.Err() == nil {
				return running(out, wait), out, nil
			}
			return nil, RunResult{}, s.toolError(fmt.Errorf("mcpserver: run %s: events ended without a final event", run.ID))
		}
		res := final.Data.Result
		if res == nil {
			res = &events.Result{}
		}
		if into := res.Meta.MergedInto; into != "" && into != run.ID && hop < maxMergeHops {
			out.MergedInto = cmp.Or(out.MergedInto, into)
			run = run.Follow(into)
			continue
		}
		if e := res.Meta.Error; e != nil {
			out.Status, out.Error = StatusFailed, &RunFailure{Kind: e.Kind, Message: res.ErrorText()}
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
				Text: fmt.Sprintf("the run failed (%s): %s", e.Kind, out.Error.Message)}}}, out, nil
		}
		var sb strings.Builder
		for _, p := range res.Payloads {
			if !p.IsError {
				sb.WriteString(p.Text)
			}
		}
		out.Status, out.Reply = StatusDone, sb.String()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out.Reply}}}, out, nil
	}
}

// running is the answer for a run that did not end within wait.
func running(out RunResult, wait time.Duration) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
		"run %s of session %q is still running after %s: call get_run with this session and runId %q to wait for its reply",
		out.RunID, out.Session, wait, out.RunID)}}}
}

// progress sends a streaming reply's text as progress notifications: the
// text that came since the last one, when the events caught up (so text
// that came together goes out together). Progress counts the bytes sent.
type progress struct {
	ctx   context.Context
	ss    *mcp.ServerSession
	token any
	buf   strings.Builder
	sent  float64
}

func newProgress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	p := &progress{ctx: ctx}
	if req != nil && req.Params != nil {
		p.ss, p.token = req.Session, req.Params.GetProgressToken()
	}
	return p
}

func (p *progress) add(text string) {
	if p.token != nil {
		p.buf.WriteString(text)
	}
}

func (p *progress) flush() {
	if p.token == nil || p.ss == nil || p.buf.Len() == 0 {
		return
	}
	text := p.buf.String()
	p.buf.Reset()
	p.sent += float64(len(text))
	// A notification the client does not read is no failure of the run:
	// the result still comes.
	_ = p.ss.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.sent, Message: text})
}

func (s *Server) history(ctx context.Context, _ *mcp.CallToolRequest, in HistoryArgs) (*mcp.CallToolResult, HistoryPage, error) {
	if _, err := reach(ctx, in.Session, false); err != nil {
		return nil, HistoryPage{}, err
	}
	limit := cmp.Or(min(max(in.Limit, 0), HistoryMax), HistoryDefault)
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	entries, err := s.client.History(rctx, in.Session)
	if err != nil {
		return nil, HistoryPage{}, s.toolError(err)
	}
	var msgs []*message.Message
	for i := range entries {
		if m := entries[i].Message; m != nil {
			msgs = append(msgs, m)
		}
	}
	return nil, historyPage(in.Session, msgs, in.Before, limit), nil
}

// historyPage is the page of msgs ending before before (the newest when
// nil): at most limit messages, their texts under HistoryPageBytes.
func historyPage(session string, msgs []*message.Message, before *int, limit int) HistoryPage {
	end := len(msgs)
	if before != nil {
		end = min(max(*before, 0), end)
	}
	page := HistoryPage{Session: session, Total: len(msgs), Messages: []HistoryEntry{}}
	start, size := end, 0
	for start > 0 && end-start < limit {
		e := entryOf(start-1, msgs[start-1])
		if size += len(e.Text); size > HistoryPageBytes && start < end {
			break
		}
		page.Messages = append(page.Messages, e)
		start--
	}
	for i, j := 0, len(page.Messages)-1; i < j; i, j = i+1, j-1 {
		page.Messages[i], page.Messages[j] = page.Messages[j], page.Messages[i]
	}
	if start > 0 {
		page.Next = new(start)
	}
	return page
}

// entryOf renders message i of a conversation.
func entryOf(i int, m *message.Message) HistoryEntry {
	e := HistoryEntry{Index: i, Role: string(m.Role), ToolName: m.ToolName, IsError: m.IsError}
	var sb strings.Builder
	for _, b := range m.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			sb.WriteString(b.Text)
		case message.BlockToolCall:
			e.ToolCalls = append(e.ToolCalls, ToolCall{ID: b.ID, Name: b.Name})
		case message.BlockImage:
			e.Images++
		}
	}
	e.Text = sb.String()
	if e.Text == "" && m.ErrorMessage != "" {
		e.Text, e.IsError = m.ErrorMessage, true
	}
	if len(e.Text) > HistoryTextBytes {
		e.Text, e.Truncated = truncate(e.Text, HistoryTextBytes), true
	}
	if m.Timestamp > 0 {
		e.Timestamp = time.UnixMilli(m.Timestamp).UTC()
	}
	return e
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (s *Server) sessions(ctx context.Context, _ *mcp.CallToolRequest, in SessionsArgs) (*mcp.CallToolResult, SessionsPage, error) {
	p := auth.FromContext(ctx)
	if !p.CanRead() {
		return nil, SessionsPage{}, errors.New("this caller may not read sessions")
	}
	if len(in.Query) > maxQueryBytes {
		return nil, SessionsPage{}, fmt.Errorf("query is longer than %d bytes", maxQueryBytes)
	}
	q := admin.SessionsRequest{Limit: cmp.Or(min(max(in.Limit, 0), SessionsMax), SessionsDefault),
		Scope: admin.ScopeOf(p.Prefixes, p.Sessions), Query: in.Query, State: true}
	if in.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(in.Cursor)
		if len(in.Cursor) > maxCursorBytes || err != nil || len(raw) == 0 {
			return nil, SessionsPage{}, errors.New("cursor is not a listing's next")
		}
		q.After = string(raw)
	}
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	rep, err := s.client.SessionsPage(rctx, q)
	if err != nil {
		return nil, SessionsPage{}, s.toolError(err)
	}
	out := SessionsPage{Sessions: []SessionItem{}, Total: rep.Total}
	for _, ss := range rep.Sessions {
		if !p.AllowsSession(ss.Key) {
			continue // the fleet filtered by the same scope: never reached
		}
		out.Sessions = append(out.Sessions, SessionItem{Key: ss.Key, LastActivity: time.UnixMilli(ss.LastActivity).UTC(), State: ss.State,
			LastRun: ss.LastRun, Running: ss.Running, Turns: ss.Turns, CostUSD: ss.CostUSD})
	}
	if rep.Next != "" {
		out.Next = base64.RawURLEncoding.EncodeToString([]byte(rep.Next))
	}
	return nil, out, nil
}
