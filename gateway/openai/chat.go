package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
)

// chatRequest is what POST /v1/chat/completions reads; other fields are
// ignored.
type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools           []chatTool `json:"tools"`
	User            string     `json:"user"`
	ReasoningEffort string     `json:"reasoning_effort"`
	N               *int       `json:"n"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// contentPart is a part of a message's content, in either wire API.
type contentPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Refusal  string          `json:"refusal"`
	ImageURL json.RawMessage `json:"image_url"` // chat: {"url": …}; Responses: a string
}

// contentOf reads a content that is a string, null or a list of parts.
func contentOf(param string, raw json.RawMessage) (string, []events.Image, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, badParam(param, "content must be a string or a list of parts")
		}
		return s, nil, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, badParam(param, "content must be a string or a list of parts")
	}
	var (
		texts  []string
		images []events.Image
	)
	for i, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			texts = append(texts, p.Text)
		case "refusal":
			texts = append(texts, p.Refusal)
		case "image_url", "input_image":
			var url string
			if len(p.ImageURL) > 0 && p.ImageURL[0] == '"' {
				_ = json.Unmarshal(p.ImageURL, &url)
			} else {
				var u struct {
					URL string `json:"url"`
				}
				_ = json.Unmarshal(p.ImageURL, &u)
				url = u.URL
			}
			img, err := dataImage(fmt.Sprintf("%s[%d].image_url", param, i), url)
			if err != nil {
				return "", nil, err
			}
			images = append(images, img)
		default:
			return "", nil, badParam(fmt.Sprintf("%s[%d].type", param, i), "content parts of type %q are not supported", clip(p.Type))
		}
	}
	return strings.Join(texts, ""), images, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// chatItems reads a chat request's messages; system and developer
// messages are left out (the fleet's system prompt is its operator's).
func chatItems(msgs []chatMessage) ([]item, error) {
	if len(msgs) > maxItems {
		return nil, badParam("messages", "at most %d messages", maxItems)
	}
	var out []item
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		text, images, err := contentOf(param+".content", m.Content)
		if err != nil {
			return nil, err
		}
		switch m.Role {
		case "system", "developer":
		case "user":
			out = append(out, item{role: roleUser, text: text, images: images})
		case "assistant":
			it := item{role: roleAssistant, text: strings.TrimSpace(text)}
			for _, tc := range m.ToolCalls {
				it.calls = append(it.calls, call{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
			out = append(out, it)
		case "tool":
			if m.ToolCallID == "" {
				return nil, badParam(param+".tool_call_id", "a tool message needs tool_call_id")
			}
			out = append(out, item{role: roleTool, text: text, callID: m.ToolCallID})
		default:
			return nil, badParam(param+".role", "role %q is not supported", clip(m.Role))
		}
	}
	return out, nil
}

// thinkingOf maps a reasoning effort to the fleet's thinking level.
func thinkingOf(effort string) (string, error) {
	switch effort {
	case "":
		return "", nil
	case "none":
		return "off", nil
	case "minimal", "low", "medium", "high", "xhigh":
		return effort, nil
	}
	return "", badParam("reasoning_effort", "unknown reasoning effort %q", clip(effort))
}

// chat serves POST /v1/chat/completions.
func (a *API) chat(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	if !p.CanSend() {
		writeError(w, &apiError{status: http.StatusForbidden, typ: "permission_error", msg: "this token may not send"})
		return
	}
	var req chatRequest
	if err := a.decodeBody(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	t, err := a.chatTurn(r, p, &req)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	run, err := a.send(r.Context(), t)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	created := a.opt.Now().Unix()
	id := "chatcmpl-" + strings.TrimPrefix(respID{Session: t.session, Run: run.ID, Model: t.model, Created: created}.encode(), respPrefix)
	w.Header().Set(HeaderSession, t.session)
	c := chatOut{id: id, created: created, model: t.model}
	if !req.Stream {
		var final *events.Event
		var n normalizer
		err := pump(r.Context(), run, a.opt.KeepAlive, nil, func(ev *events.Event) bool {
			for _, pt := range n.feed(ev) {
				c.add(pt)
			}
			if ev.Terminal() {
				final = ev
			}
			return true
		})
		if err != nil {
			a.fail(w, r, err)
			return
		}
		res := resultOf(final)
		if e := res.Meta.Error; e != nil {
			writeError(w, runError(e.Kind, e.Message))
			return
		}
		writeJSON(w, http.StatusOK, c.completion(res))
		return
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	s := newSSE(w, a.opt.WriteTimeout)
	defer s.end()
	c.includeUsage = includeUsage
	first, _ := json.Marshal(c.chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	_ = s.pre("", first)
	var n normalizer
	var werr error
	err = pump(r.Context(), run, a.opt.KeepAlive, s.comment, func(ev *events.Event) bool {
		for _, pt := range n.feed(ev) {
			delta := c.add(pt)
			if werr = s.chunk(c.chunk(delta, nil)); werr != nil {
				return false
			}
		}
		if !ev.Terminal() {
			return true
		}
		res := resultOf(ev)
		if e := res.Meta.Error; e != nil {
			if ae := runError(e.Kind, e.Message); !s.refuse(ae) {
				b, _ := json.Marshal(ae.body())
				werr = s.event("", b)
			}
			return false
		}
		calls := clientCalls(res)
		if len(calls) > 0 {
			var tcs []any
			for i, pc := range calls {
				tcs = append(tcs, map[string]any{"index": i, "id": pc.ID, "type": "function",
					"function": map[string]any{"name": pc.Name, "arguments": pc.Arguments}})
			}
			if werr = s.chunk(c.chunk(map[string]any{"tool_calls": tcs}, nil)); werr != nil {
				return false
			}
		}
		reason := finishReason(res)
		if werr = s.chunk(c.chunk(map[string]any{}, &reason)); werr != nil {
			return false
		}
		if includeUsage {
			u := c.base()
			u["choices"] = []any{}
			u["usage"] = chatUsage(res)
			if werr = s.chunk(u); werr != nil {
				return false
			}
		}
		werr = s.event("", []byte("[DONE]"))
		return false
	})
	if err != nil && r.Context().Err() == nil {
		if ae := asAPIError(err); !s.refuse(ae) {
			b, _ := json.Marshal(ae.body())
			_ = s.event("", b)
		}
	}
}

// chatTurn reads what the request sends where.
func (a *API) chatTurn(r *http.Request, p *auth.Principal, req *chatRequest) (*turn, error) {
	if req.N != nil && *req.N != 1 {
		return nil, badParam("n", "only n=1 is supported")
	}
	ref, err := a.resolveModel(p, req.Model)
	if err != nil {
		return nil, err
	}
	thinking, err := thinkingOf(req.ReasoningEffort)
	if err != nil {
		return nil, err
	}
	items, err := chatItems(req.Messages)
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
		ct, err := toolOf(fmt.Sprintf("tools[%d].function.parameters", i), tl.Function.Name, tl.Function.Description, tl.Function.Parameters)
		if err != nil {
			return nil, err
		}
		tools = append(tools, ct)
	}
	key, fresh, err := sessionKey(p, r.Header.Get(HeaderSession), req.User)
	if err != nil {
		return nil, err
	}
	return &turn{session: key, fresh: fresh, model: req.Model, ref: ref, items: items, tools: tools, thinking: thinking, follow: true, param: "messages"}, nil
}

// chunk writes a chat.completion.chunk.
func (s *sse) chunk(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.event("", b)
}

// chatOut collects a chat completion's output.
type chatOut struct {
	id, model    string
	includeUsage bool // every chunk carries "usage": null, the last one the usage
	created      int64
	content      strings.Builder
	reasoning    strings.Builder
}

// add takes a part and returns the chunk delta that sends it.
func (c *chatOut) add(pt part) map[string]any {
	b, field := &c.content, "content"
	if pt.kind == kindReasoning {
		b, field = &c.reasoning, "reasoning_content"
	}
	d := pt.delta
	if pt.start && b.Len() > 0 {
		d = "\n\n" + d // the next model call's text, after a tool round
	}
	b.WriteString(d)
	return map[string]any{field: d}
}

func (c *chatOut) base() map[string]any {
	return map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model, "system_fingerprint": nil}
}

func (c *chatOut) chunk(delta map[string]any, finish *string) map[string]any {
	m := c.base()
	var fr any
	if finish != nil {
		fr = *finish
	}
	m["choices"] = []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": fr}}
	if c.includeUsage {
		m["usage"] = nil
	}
	return m
}

func (c *chatOut) completion(res *events.Result) map[string]any {
	msg := map[string]any{"role": "assistant", "content": c.content.String(), "refusal": nil, "annotations": []any{}}
	if c.reasoning.Len() > 0 {
		msg["reasoning_content"] = c.reasoning.String()
	}
	if calls := clientCalls(res); len(calls) > 0 {
		var tcs []any
		for _, pc := range calls {
			tcs = append(tcs, map[string]any{"id": pc.ID, "type": "function", "function": map[string]any{"name": pc.Name, "arguments": pc.Arguments}})
		}
		msg["tool_calls"] = tcs
		if c.content.Len() == 0 {
			msg["content"] = nil
		}
	}
	return map[string]any{"id": c.id, "object": "chat.completion", "created": c.created, "model": c.model, "system_fingerprint": nil,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finishReason(res)}},
		"usage":   chatUsage(res)}
}

// resultOf is a final event's result (never nil).
func resultOf(ev *events.Event) *events.Result {
	if ev == nil || ev.Data.Result == nil {
		return &events.Result{}
	}
	return ev.Data.Result
}

// clientCalls are the client tool calls a run stopped for (calls that
// wait for an approval are the native API's to answer).
func clientCalls(res *events.Result) []events.PendingCall {
	var out []events.PendingCall
	for _, pc := range res.Meta.PendingToolCalls {
		if !pc.Approval {
			out = append(out, pc)
		}
	}
	return out
}

func finishReason(res *events.Result) string {
	switch {
	case len(clientCalls(res)) > 0:
		return "tool_calls"
	case res.Meta.StopReason == "length" || res.Meta.StopReason == "max_tokens":
		return "length"
	}
	return "stop"
}

// usage is a run's token counts as OpenAI counts them: prompt tokens
// include cached ones.
type usage struct{ prompt, cached, completion int64 }

func usageOf(res *events.Result) usage {
	var u usage
	if am := res.Meta.AgentMeta; am != nil && am.Usage != nil {
		u.cached = am.Usage.CacheRead
		u.prompt = am.Usage.Input + am.Usage.CacheRead + am.Usage.CacheWrite
		u.completion = am.Usage.Output
	}
	return u
}

func chatUsage(res *events.Result) map[string]any {
	u := usageOf(res)
	return map[string]any{"prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.prompt + u.completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.cached}}
}
