package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/lanefleet/lanefleet"
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
	Index    *int   `json:"index,omitempty"` // in a stream's delta
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
		a.chatWhole(w, r, run, &c)
		return
	}
	a.chatStream(w, r, run, &c, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
}

// chatWhole answers a chat completion that does not stream: the run's
// reply in one completion object once it ends.
func (a *API) chatWhole(w http.ResponseWriter, r *http.Request, run *lanefleet.Run, c *chatOut) {
	var final *events.Event
	var n normalizer
	err := pump(r.Context(), run, a.opt.KeepAlive, nil, nil, func(ev *events.Event) bool {
		for _, pt := range n.feed(ev) {
			c.addDelta(pt)
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
}

// chatStream streams a chat completion's chunks as the run's events come,
// ending with its client tool calls, its finish reason, its usage when
// asked for, and [DONE].
func (a *API) chatStream(w http.ResponseWriter, r *http.Request, run *lanefleet.Run, c *chatOut, includeUsage bool) {
	s := newSSE(w, a.opt.WriteTimeout)
	defer s.end()
	c.includeUsage = includeUsage
	c.frames()
	empty := ""
	first, _ := json.Marshal(c.chunk(chatDelta{Role: "assistant", Content: &empty}, nil))
	_ = s.pre("", first)
	var n normalizer
	var werr error
	err := pump(r.Context(), run, a.opt.KeepAlive, s.flush, s.comment, func(ev *events.Event) bool {
		for _, pt := range n.feed(ev) {
			if werr = s.delta(c, pt); werr != nil {
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
		if calls := clientCalls(res); len(calls) > 0 {
			if werr = s.chunk(c.chunk(chatDelta{ToolCalls: toolCallsOf(calls, true)}, nil)); werr != nil {
				return false
			}
		}
		reason := finishReason(res)
		if werr = s.chunk(c.chunk(chatDelta{}, &reason)); werr != nil {
			return false
		}
		if includeUsage {
			u := c.chunk(chatDelta{}, nil)
			u.Choices, u.Usage = []chunkChoice{}, chatUsage(res)
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

// delta writes the chunk of a text or reasoning part from c's frames,
// with the bytes of the chunk marshalled whole (TestDeltaChunkBytes), in
// the stream's scratch buffer: a delta costs no encoding of the chunk's
// envelope and no allocation.
func (s *sse) delta(c *chatOut, pt part) error {
	d := c.addDelta(pt)
	b := append(s.scratch[:0], c.head...)
	if pt.kind == kindReasoning {
		b = append(b, `"reasoning_content":`...)
	} else {
		b = append(b, `"content":`...)
	}
	b = appendJSONString(b, d)
	b = append(b, c.tail...)
	s.scratch = b
	if err := s.open(); err != nil {
		return err
	}
	return s.write(b)
}

// chatOut collects a chat completion's output.
type chatOut struct {
	id, model    string
	includeUsage bool // every chunk carries "usage": null, the last one the usage
	created      int64
	content      strings.Builder
	reasoning    strings.Builder
	// head and tail frame a delta's chunk (see frames): "data: " and the
	// chunk up to the delta's members, and the rest of the chunk after
	// them with the event's end.
	head, tail []byte
}

// frames encodes, once a stream, the chunk a delta goes out in, around
// its delta's members: json.Marshal of a chunk with an empty delta, cut
// at the delta's braces, so a delta's chunk has the same bytes as one
// marshalled whole (TestDeltaChunkBytes). Nothing after the delta is a
// caller's string, so the last "delta":{} is the delta's.
func (c *chatOut) frames() {
	b, _ := json.Marshal(c.chunk(chatDelta{}, nil))
	const mark = `"delta":{`
	i := bytes.LastIndex(b, []byte(mark+"}")) + len(mark)
	c.head = append([]byte("data: "), b[:i]...)
	c.tail = append(b[i:len(b):len(b)], "\n\n"...)
}

// The chat completion's wire types, fields in OpenAI's order.
type (
	chatChunk struct {
		ID                string        `json:"id"`
		Object            string        `json:"object"`
		Created           int64         `json:"created"`
		Model             string        `json:"model"`
		SystemFingerprint *string       `json:"system_fingerprint"`
		Choices           []chunkChoice `json:"choices"`
		Usage             any           `json:"usage,omitempty"` // nullUsage: "usage": null
	}
	chunkChoice struct {
		Index        int       `json:"index"`
		Delta        chatDelta `json:"delta"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason *string   `json:"finish_reason"`
	}
	chatDelta struct {
		Role             string         `json:"role,omitempty"`
		Content          *string        `json:"content,omitempty"`
		ReasoningContent *string        `json:"reasoning_content,omitempty"`
		ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
	}
	chatCompletion struct {
		ID                string       `json:"id"`
		Object            string       `json:"object"`
		Created           int64        `json:"created"`
		Model             string       `json:"model"`
		Choices           []chatChoice `json:"choices"`
		Usage             *chatUsageT  `json:"usage"`
		SystemFingerprint *string      `json:"system_fingerprint"`
	}
	chatChoice struct {
		Index        int             `json:"index"`
		Message      chatCompMessage `json:"message"`
		Logprobs     *struct{}       `json:"logprobs"`
		FinishReason string          `json:"finish_reason"`
	}
	chatCompMessage struct {
		Role             string         `json:"role"`
		Content          *string        `json:"content"`
		ReasoningContent *string        `json:"reasoning_content,omitempty"`
		Refusal          *string        `json:"refusal"`
		ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
		Annotations      []struct{}     `json:"annotations"`
	}
	chatUsageT struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		TotalTokens         int64 `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
)

// nullUsage marshals as null: a chunk's "usage" under include_usage.
type nullUsage struct{}

func (nullUsage) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// addDelta takes a part and returns the text its chunk's delta sends.
func (c *chatOut) addDelta(pt part) string {
	b := &c.content
	if pt.kind == kindReasoning {
		b = &c.reasoning
	}
	d := pt.delta
	if pt.start && b.Len() > 0 {
		d = "\n\n" + d // the next model call's text, after a tool round
	}
	b.WriteString(d)
	return d
}

func (c *chatOut) chunk(delta chatDelta, finish *string) chatChunk {
	ch := chatChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
		Choices: []chunkChoice{{Delta: delta, FinishReason: finish}}}
	if c.includeUsage {
		ch.Usage = nullUsage{}
	}
	return ch
}

// toolCallsOf are the calls as a message (or, with index, a delta) lists
// them.
func toolCallsOf(calls []events.PendingCall, index bool) []chatToolCall {
	out := make([]chatToolCall, len(calls))
	for i, pc := range calls {
		out[i] = chatToolCall{ID: pc.ID, Type: "function"}
		if index {
			out[i].Index = &i
		}
		out[i].Function.Name, out[i].Function.Arguments = pc.Name, pc.Arguments
	}
	return out
}

func (c *chatOut) completion(res *events.Result) chatCompletion {
	content := c.content.String()
	msg := chatCompMessage{Role: "assistant", Content: &content, Annotations: []struct{}{}}
	if c.reasoning.Len() > 0 {
		r := c.reasoning.String()
		msg.ReasoningContent = &r
	}
	if calls := clientCalls(res); len(calls) > 0 {
		msg.ToolCalls = toolCallsOf(calls, false)
		if content == "" {
			msg.Content = nil
		}
	}
	return chatCompletion{ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model,
		Choices: []chatChoice{{Message: msg, FinishReason: finishReason(res)}}, Usage: chatUsage(res)}
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

func chatUsage(res *events.Result) *chatUsageT {
	u := usageOf(res)
	out := &chatUsageT{PromptTokens: u.prompt, CompletionTokens: u.completion, TotalTokens: u.prompt + u.completion}
	out.PromptTokensDetails.CachedTokens = u.cached
	return out
}
