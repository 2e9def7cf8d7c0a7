package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
)

// responsesRequest is what POST /v1/responses reads; other fields are
// ignored.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Stream             bool            `json:"stream"`
	Background         bool            `json:"background"`
	PreviousResponseID string          `json:"previous_response_id"`
	Tools              []responsesTool `json:"tools"`
	User               string          `json:"user"`
	Reasoning          *struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
}

type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// inputItem is one item of a Responses input.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// responsesItems reads a Responses input: a string (one user message) or
// a list of items. An assistant message and the function calls after it
// are one assistant message, as a chat completion has them; system and
// developer messages and reasoning items are left out.
func responsesItems(raw json.RawMessage) ([]item, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badParam("input", "input is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badParam("input", "input must be a string or a list of items")
		}
		return []item{{role: roleUser, text: s}}, nil
	}
	var in []inputItem
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, badParam("input", "input must be a string or a list of items")
	}
	if len(in) > maxItems {
		return nil, badParam("input", "at most %d input items", maxItems)
	}
	var out []item
	lastAssistant := func() *item {
		if n := len(out); n > 0 && out[n-1].role == roleAssistant {
			return &out[n-1]
		}
		out = append(out, item{role: roleAssistant})
		return &out[len(out)-1]
	}
	for i, it := range in {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			text, images, err := contentOf(param+".content", it.Content)
			if err != nil {
				return nil, err
			}
			switch it.Role {
			case "system", "developer":
			case "user":
				out = append(out, item{role: roleUser, text: text, images: images})
			case "assistant":
				a := lastAssistant()
				a.text = strings.TrimSpace(a.text + "\n\n" + strings.TrimSpace(text))
			default:
				return nil, badParam(param+".role", "role %q is not supported", clip(it.Role))
			}
		case "function_call":
			a := lastAssistant()
			a.calls = append(a.calls, call{ID: it.CallID, Name: it.Name, Arguments: it.Arguments})
		case "function_call_output":
			if it.CallID == "" {
				return nil, badParam(param+".call_id", "a function_call_output needs call_id")
			}
			text, _, err := contentOf(param+".output", it.Output)
			if err != nil {
				return nil, err
			}
			out = append(out, item{role: roleTool, text: text, callID: it.CallID})
		case "reasoning":
		default:
			return nil, badParam(param+".type", "input items of type %q are not supported", clip(it.Type))
		}
	}
	return out, nil
}

// createResponse serves POST /v1/responses.
func (a *API) createResponse(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	if !p.CanSend() {
		writeError(w, &apiError{status: http.StatusForbidden, typ: "permission_error", msg: "this token may not send"})
		return
	}
	var req responsesRequest
	if err := a.decodeBody(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	t, err := a.responsesTurn(r, p, &req)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	t.follow = !req.Background || req.Stream
	run, err := a.send(r.Context(), t)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	id := respID{Session: t.session, Run: run.ID, Model: t.model, Created: a.opt.Now().Unix(), Background: req.Background}
	w.Header().Set(HeaderSession, t.session)
	b := newBuilder(id)
	switch {
	case req.Stream:
		a.streamResponse(w, r, b, -1, true)
	case req.Background:
		writeJSON(w, http.StatusOK, b.response())
	default:
		if err := pump(r.Context(), run, a.opt.KeepAlive, nil, nil, b.feed); err != nil {
			a.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, b.response())
	}
}

// responsesTurn reads what the request sends where.
func (a *API) responsesTurn(r *http.Request, p *auth.Principal, req *responsesRequest) (*turn, error) {
	ref, err := a.resolveModel(p, req.Model)
	if err != nil {
		return nil, err
	}
	var thinking string
	if req.Reasoning != nil {
		if thinking, err = thinkingOf(req.Reasoning.Effort); err != nil {
			return nil, err
		}
	}
	items, err := responsesItems(req.Input)
	if err != nil {
		return nil, err
	}
	if len(req.Tools) > events.MaxClientTools {
		return nil, badParam("tools", "at most %d tools", events.MaxClientTools)
	}
	var tools []events.ClientTool
	for i, tl := range req.Tools {
		if tl.Type != "function" {
			return nil, badParam(fmt.Sprintf("tools[%d].type", i), "only function tools are supported")
		}
		ct, err := toolOf(fmt.Sprintf("tools[%d].parameters", i), tl.Name, tl.Description, tl.Parameters)
		if err != nil {
			return nil, err
		}
		tools = append(tools, ct)
	}
	t := &turn{model: req.Model, ref: ref, items: items, tools: tools, thinking: thinking, param: "input"}
	if req.PreviousResponseID != "" {
		prev, err := a.reach(p, req.PreviousResponseID)
		if err != nil {
			return nil, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "previous_response_id",
				msg: fmt.Sprintf("Previous response with id '%s' not found.", clip(req.PreviousResponseID))}
		}
		t.session = prev.Session
		return t, nil
	}
	if t.session, t.fresh, err = sessionKey(p, r.Header.Get(HeaderSession), req.User); err != nil {
		return nil, err
	}
	return t, nil
}

// reach decodes a response id the caller may reach.
func (a *API) reach(p *auth.Principal, s string) (respID, error) {
	id, err := decodeRespID(s)
	if err != nil || !p.AllowsSession(id.Session) {
		return respID{}, errNotFound
	}
	return id, nil
}

// getResponse serves GET /v1/responses/{id}: the response as it is now,
// or with ?stream=true its events (after starting_after).
func (a *API) getResponse(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	id, err := a.reach(p, r.PathValue("id"))
	if err != nil {
		a.fail(w, r, responseNotFound(r.PathValue("id")))
		return
	}
	q := r.URL.Query()
	if stream, _ := strconv.ParseBool(q.Get("stream")); stream {
		after := int64(-1)
		if s := q.Get("starting_after"); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				a.fail(w, r, badParam("starting_after", "starting_after must be a sequence number"))
				return
			}
			after = n
		}
		a.streamResponse(w, r, newBuilder(id), after, false)
		return
	}
	b, err := a.poll(r.Context(), newBuilder(id))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b.response())
}

func responseNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
		msg: fmt.Sprintf("Response with id '%s' not found.", clip(id))}
}

// poll reads the run's events as they are now (pollRun): the response as
// it is now.
func (a *API) poll(ctx context.Context, b *builder) (*builder, error) {
	limit := max(4*a.opt.PollWait, pollLimit)
	if err := pollRun(ctx, a.c.Run(b.id.Session, b.id.Run), a.opt.PollWait, limit, func(ev *events.Event) { b.feed(ev) }); err != nil {
		return nil, err
	}
	return b, nil
}

// pollLimit bounds a poll of a run that shows nothing: long enough for
// the fleet to say it does not know the run (404).
const pollLimit = 2 * time.Second

// cancelResponse serves POST /v1/responses/{id}/cancel: it stops the
// session's running turn when that is the response's run, and returns the
// response once its run ended.
func (a *API) cancelResponse(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	id, err := a.reach(p, r.PathValue("id"))
	if err != nil {
		a.fail(w, r, responseNotFound(r.PathValue("id")))
		return
	}
	if !p.CanSend() {
		writeError(w, &apiError{status: http.StatusForbidden, typ: "permission_error", msg: "this token may not send"})
		return
	}
	b, err := a.poll(r.Context(), newBuilder(id))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if b.done {
		writeJSON(w, http.StatusOK, b.response())
		return
	}
	if _, err := a.c.Stop(r.Context(), id.Session); err != nil {
		a.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	b = newBuilder(id)
	if err := pump(ctx, a.c.Run(id.Session, id.Run), a.opt.KeepAlive, nil, nil, b.feed); err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b.response())
}

// streamResponse streams the response's events after sequence number
// after (-1: all). A response created by this request (create) that
// fails before any output is answered with the error's status instead.
func (a *API) streamResponse(w http.ResponseWriter, r *http.Request, b *builder, after int64, create bool) {
	s := newSSE(w, a.opt.WriteTimeout)
	defer s.end()
	var werr error
	b.emit = func(typ string, ev map[string]any) {
		if werr != nil || int64(b.seq) <= after {
			return
		}
		if e := b.res; typ == "response.failed" && create && e != nil && e.Meta.Error != nil && s.refuse(runError(e.Meta.Error.Kind, e.Meta.Error.Message)) {
			werr = errRefused
			return
		}
		data, err := eventJSON(typ, b.seq, ev)
		if err != nil {
			werr = err
			return
		}
		if typ == "response.created" || typ == "response.in_progress" {
			werr = s.pre(typ, data)
		} else {
			werr = s.event(typ, data)
		}
	}
	b.begin()
	err := pump(r.Context(), a.c.Run(b.id.Session, b.id.Run), a.opt.KeepAlive, s.flush, s.comment, func(ev *events.Event) bool {
		b.feed(ev)
		return werr == nil
	})
	if err != nil && werr == nil && r.Context().Err() == nil {
		e := asAPIError(err)
		if s.refuse(e) {
			return
		}
		data, _ := json.Marshal(map[string]any{"type": "error", "code": e.code, "message": e.msg, "param": nil, "sequence_number": b.seq})
		_ = s.event("error", data)
	}
}

// eventJSON is a stream event as OpenAI sends it: type and
// sequence_number first, then the event's fields.
func eventJSON(typ string, seq int, ev map[string]any) ([]byte, error) {
	rest, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	head, err := json.Marshal(struct {
		Type string `json:"type"`
		Seq  int    `json:"sequence_number"`
	}{typ, seq})
	if err != nil {
		return nil, err
	}
	if len(rest) > 2 {
		head = append(head[:len(head)-1], ',')
		head = append(head, rest[1:]...)
	}
	return head, nil
}

// errRefused ends a stream answered with an error instead.
var errRefused = errors.New("refused")

// builder turns a run's events into the Responses API's: the stream's
// events, numbered from 0 (the same numbers for the same run on every
// gateway process), and the response they describe.
type builder struct {
	id     respID
	emit   func(typ string, ev map[string]any) // nil: build the response alone
	seq    int                                 // the next event's sequence number
	begun  bool
	n      normalizer
	output []*outItem
	open   *outItem
	status string
	done   bool
	res    *events.Result
}

type outItem struct {
	index int
	typ   string // message, reasoning, function_call
	id    string
	text  strings.Builder
	call  events.PendingCall
	done  bool
}

func newBuilder(id respID) *builder {
	b := &builder{id: id, status: "in_progress"}
	if id.Background {
		b.status = "queued"
	}
	return b
}

func (b *builder) send(typ string, ev map[string]any) {
	if b.emit != nil {
		b.emit(typ, ev)
	}
	b.seq++
}

// begin sends response.created and response.in_progress.
func (b *builder) begin() {
	if b.begun {
		return
	}
	b.begun = true
	b.send("response.created", map[string]any{"response": b.response()})
	b.status = "in_progress"
	b.send("response.in_progress", map[string]any{"response": b.response()})
}

// feed takes the run's next event; it reports true (following goes on).
func (b *builder) feed(ev *events.Event) bool {
	b.begin()
	for _, pt := range b.n.feed(ev) {
		b.part(pt)
	}
	if ev.Terminal() {
		b.final(resultOf(ev))
	}
	return true
}

func (b *builder) part(pt part) {
	typ := "message"
	if pt.kind == kindReasoning {
		typ = "reasoning"
	}
	if b.open == nil || pt.start || b.open.typ != typ {
		b.close()
		it := &outItem{index: len(b.output), typ: typ}
		prefix := "msg_"
		if typ == "reasoning" {
			prefix = "rs_"
		}
		it.id = fmt.Sprintf("%s%s_%d", prefix, b.id.Run, it.index)
		b.output, b.open = append(b.output, it), it
		b.send("response.output_item.added", map[string]any{"output_index": it.index, "item": it.json()})
		b.send("response.content_part.added", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "part": it.part()})
	}
	it := b.open
	it.text.WriteString(pt.delta)
	if typ == "reasoning" {
		b.send("response.reasoning_text.delta", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "delta": pt.delta})
	} else {
		b.send("response.output_text.delta", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "delta": pt.delta, "logprobs": []any{}})
	}
}

// close ends the open item.
func (b *builder) close() {
	it := b.open
	if it == nil {
		return
	}
	b.open, it.done = nil, true
	text := it.text.String()
	if it.typ == "reasoning" {
		b.send("response.reasoning_text.done", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "text": text})
	} else {
		b.send("response.output_text.done", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "text": text, "logprobs": []any{}})
	}
	b.send("response.content_part.done", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "part": it.part()})
	b.send("response.output_item.done", map[string]any{"output_index": it.index, "item": it.json()})
}

func (b *builder) final(res *events.Result) {
	b.close()
	for _, pc := range clientCalls(res) {
		it := &outItem{index: len(b.output), typ: "function_call", call: pc}
		it.id = fmt.Sprintf("fc_%s_%d", b.id.Run, it.index)
		b.output = append(b.output, it)
		added := it.json()
		added["arguments"], added["status"] = "", "in_progress"
		b.send("response.output_item.added", map[string]any{"output_index": it.index, "item": added})
		b.send("response.function_call_arguments.delta", map[string]any{"item_id": it.id, "output_index": it.index, "delta": pc.Arguments})
		b.send("response.function_call_arguments.done", map[string]any{"item_id": it.id, "output_index": it.index, "name": pc.Name, "arguments": pc.Arguments})
		it.done = true
		b.send("response.output_item.done", map[string]any{"output_index": it.index, "item": it.json()})
	}
	b.res, b.done = res, true
	typ := "response.completed"
	switch e := res.Meta.Error; {
	case e == nil && !res.Meta.Aborted:
		b.status = "completed"
	case res.Meta.Aborted || e.Kind == events.KindInterrupted:
		b.status, typ = "cancelled", "response.incomplete"
	default:
		b.status, typ = "failed", "response.failed"
	}
	b.send(typ, map[string]any{"response": b.response()})
}

// json is the item as the response's output lists it.
func (it *outItem) json() map[string]any {
	status := "in_progress"
	if it.done {
		status = "completed"
	}
	switch it.typ {
	case "reasoning":
		content := []any{}
		if it.done {
			content = []any{it.part()}
		}
		return map[string]any{"type": "reasoning", "id": it.id, "summary": []any{}, "content": content, "status": status}
	case "function_call":
		return map[string]any{"type": "function_call", "id": it.id, "call_id": it.call.ID, "name": it.call.Name, "arguments": it.call.Arguments, "status": status}
	}
	content := []any{}
	if it.done {
		content = []any{it.part()}
	}
	return map[string]any{"type": "message", "id": it.id, "status": status, "role": "assistant", "content": content}
}

// part is the item's content part, with the text so far.
func (it *outItem) part() map[string]any {
	if it.typ == "reasoning" {
		return map[string]any{"type": "reasoning_text", "text": it.text.String()}
	}
	return map[string]any{"type": "output_text", "text": it.text.String(), "annotations": []any{}, "logprobs": []any{}}
}

// responseObject is a response as the API sends it, fields in OpenAI's
// order. (output_text is not on the wire: the SDKs compute it.)
type responseObject struct {
	ID                 string         `json:"id"`
	Object             string         `json:"object"`
	CreatedAt          int64          `json:"created_at"`
	Status             string         `json:"status"`
	Background         bool           `json:"background"`
	CompletedAt        *int64         `json:"completed_at"`
	Error              *responseError `json:"error"`
	IncompleteDetails  *struct{}      `json:"incomplete_details"`
	Instructions       *string        `json:"instructions"`
	MaxOutputTokens    *int64         `json:"max_output_tokens"`
	Model              string         `json:"model"`
	Output             []any          `json:"output"`
	ParallelToolCalls  bool           `json:"parallel_tool_calls"`
	PreviousResponseID *string        `json:"previous_response_id"`
	Reasoning          struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	} `json:"reasoning"`
	Store       bool     `json:"store"`
	Temperature *float64 `json:"temperature"`
	Text        struct {
		Format struct {
			Type string `json:"type"`
		} `json:"format"`
	} `json:"text"`
	ToolChoice string         `json:"tool_choice"`
	Tools      []any          `json:"tools"`
	TopP       *float64       `json:"top_p"`
	Truncation string         `json:"truncation"`
	Usage      *responseUsage `json:"usage"`
	User       *string        `json:"user"`
	Metadata   struct{}       `json:"metadata"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type responseUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// response is the response object as it is now.
func (b *builder) response() *responseObject {
	m := &responseObject{ID: b.id.encode(), Object: "response", CreatedAt: b.id.Created, Status: b.status,
		Background: b.id.Background, Model: b.id.Model, Output: []any{}, ParallelToolCalls: true, Store: true,
		ToolChoice: "auto", Tools: []any{}, Truncation: "disabled"}
	m.Text.Format.Type = "text"
	for _, it := range b.output {
		j := it.json()
		if !it.done && it.typ != "function_call" {
			j["content"] = []any{it.part()}
		}
		m.Output = append(m.Output, j)
	}
	if b.res == nil {
		return m
	}
	u := usageOf(b.res)
	m.Usage = &responseUsage{InputTokens: u.prompt, OutputTokens: u.completion, TotalTokens: u.prompt + u.completion}
	m.Usage.InputTokensDetails.CachedTokens = u.cached
	if b.id.Created > 0 {
		at := b.id.Created + b.res.Meta.DurationMs/1000
		m.CompletedAt = &at
	}
	if e := b.res.Meta.Error; e != nil && b.status == "failed" {
		code := "server_error"
		switch e.Kind {
		case events.KindInvalidInput, "context_overflow", "role_ordering", "image_size":
			code = "invalid_prompt"
		case events.KindDropped, events.KindRejected:
			code = "rate_limit_exceeded"
		}
		m.Error = &responseError{Code: code, Message: e.Kind + ": " + e.Message}
	}
	return m
}
