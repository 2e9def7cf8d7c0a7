package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
	"github.com/lanefleet/lanefleet/provider/internal/adapter"
	"github.com/lanefleet/lanefleet/provider/internal/jsonfast"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// Completions streams Chat Completions ("openai-completions").
type Completions struct {
	client adapter.Client
	wire   *wireCache
	route  Route
}

// NewCompletions returns a Chat Completions adapter.
func NewCompletions(cfg Config) *Completions { return NewCompletionsRouted("openai", cfg, openAIRoute) }

// NewCompletionsRouted returns a Chat Completions adapter whose calls go
// where route says: the same wire API served elsewhere (Azure OpenAI).
// name prefixes its error messages.
func NewCompletionsRouted(name string, cfg Config, route Route) *Completions {
	return &Completions{client: adapter.NewClient(name, cfg), wire: newWireCache(cfg.WireCacheBytes), route: route}
}

var _ provider.Provider = (*Completions)(nil)

// Stream sends req and streams the reply (see provider.Provider). Failures
// return the partial message and a *provider.Error.
func (c *Completions) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	return c.client.Run(ctx, req, emit, adapter.Spec{
		Build: func() (adapter.Call, error) {
			return routed(ctx, req, c.route, "chat/completions", buildChatRequest, c.wire)
		},
		Parse: func(b *stream.Builder) adapter.Parser { return &chatParser{b: b, toolIdx: map[int]int{}, cur: -1} },
	})
}

type chatChunk struct {
	Choices []chatChoice    `json:"choices"`
	Usage   *chatUsage      `json:"usage"`
	Error   json.RawMessage `json:"error"`
	// XGroq is Groq's extension: its last chunk's usage is here.
	XGroq *struct {
		Usage *chatUsage `json:"usage"`
	} `json:"x_groq"`
}

type chatChoice struct {
	Delta        chatDelta  `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
	Usage        *chatUsage `json:"usage"`
	// ContentFilterResults is Azure's verdict on the choice's text, by
	// category.
	ContentFilterResults json.RawMessage `json:"content_filter_results"`
}

type chatDelta struct {
	Content          *string             `json:"content"`
	Refusal          *string             `json:"refusal"`
	ReasoningContent *string             `json:"reasoning_content"`
	Reasoning        *string             `json:"reasoning"`
	ReasoningText    *string             `json:"reasoning_text"`
	ToolCalls        []chatToolCallDelta `json:"tool_calls"`
	ReasoningDetails []json.RawMessage   `json:"reasoning_details"`
}

type chatToolCallDelta struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string  `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

type chatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	// PromptCacheHitTokens is DeepSeek's count of cached prompt tokens
	// (its prompt_cache_miss_tokens are the rest).
	PromptCacheHitTokens int64 `json:"prompt_cache_hit_tokens"`
	PromptTokensDetails  *struct {
		CachedTokens     int64 `json:"cached_tokens"`
		CacheWriteTokens int64 `json:"cache_write_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// chatParser folds chunks into the builder.
type chatParser struct {
	b        *stream.Builder
	cur      int         // index of the block deltas currently go to, -1 = none
	curKind  string      // its type
	toolIdx  map[int]int // wire tool call index → block index
	details  []json.RawMessage
	finish   string
	filtered string // the categories a content filter stopped the reply for
	finished bool   // [DONE] seen
}

var doneMarker = []byte("[DONE]")

// Event applies one chunk of the stream (see adapter.Parser).
func (p *chatParser) Event(ev sse.Event) *provider.Error {
	switch string(ev.Name) {
	case "", "message", "chunk":
	case "error":
		return failover.FromStream(ev.Data, errors.New("openai: error event"))
	default:
		return stream.Protocol("openai: unknown event type %q", ev.Name)
	}
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 {
		return nil
	}
	if bytes.Equal(data, doneMarker) {
		p.finished = true
		return nil
	}
	if p.fastContent(data) {
		return nil
	}
	return p.decode(data)
}

// decode applies a chunk by decoding it whole: what fastContent is not
// sure of.
func (p *chatParser) decode(data []byte) *provider.Error {
	var ch chatChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return stream.Protocol("openai: malformed chunk: %v", err)
	}
	if perr := stream.InBand(ch.Error, data, "openai: error in stream"); perr != nil {
		return perr
	}
	if ch.Usage != nil {
		p.usage(ch.Usage)
	} else if ch.XGroq != nil && ch.XGroq.Usage != nil {
		p.usage(ch.XGroq.Usage)
	}
	for i := range ch.Choices {
		if err := p.choice(&ch.Choices[i]); err != nil {
			return err
		}
	}
	return nil
}

// The keys fastContent reads (or must find absent or null) at each level
// of a chunk, in the order it reads them.
var (
	chunkKeys  = [...]string{"choices", "usage", "error", "x_groq"}
	groqKeys   = [...]string{"usage"}
	choiceKeys = [...]string{"delta", "finish_reason", "usage"}
	deltaKeys  = [...]string{"content", "refusal", "reasoning_content", "reasoning", "reasoning_text", "tool_calls", "reasoning_details"}
	nullValue  = []byte("null")
)

// absent reports whether a member Members found is missing or null
// (which the decoder takes as missing for every field fastContent checks).
func absent(data []byte, j int) bool {
	return j == jsonfast.Missing || j >= 0 && bytes.HasPrefix(data[j:], nullValue)
}

// fastContent applies a chunk that carries only a text delta without
// reflection; false means the chunk needs the full decoder. It reads each
// field at its place in valid JSON (jsonfast.Members, one pass a level)
// and steps aside when the chunk has anything else the decoder acts on (a
// second choice, usage, an error, a finish reason, a refusal, reasoning,
// tool calls) in any spelling the decoder matches: FuzzFastMatchesChunk
// holds it to what the decoder applies.
func (p *chatParser) fastContent(data []byte) bool {
	if !jsonfast.Valid(data) {
		return false
	}
	var top [len(chunkKeys)]int
	if !jsonfast.Members(data, 0, chunkKeys[:], top[:]) || !absent(data, top[1]) || !absent(data, top[2]) {
		return false
	}
	if !absent(data, top[3]) {
		var g [len(groqKeys)]int
		if !jsonfast.Members(data, top[3], groqKeys[:], g[:]) || !absent(data, g[0]) {
			return false
		}
	}
	choice := jsonfast.Element(data, top[0], 0)
	if choice < 0 || jsonfast.Element(data, top[0], 1) != jsonfast.Missing {
		return false
	}
	var c [len(choiceKeys)]int
	if !jsonfast.Members(data, choice, choiceKeys[:], c[:]) || !absent(data, c[1]) || !absent(data, c[2]) {
		return false
	}
	var d [len(deltaKeys)]int
	if !jsonfast.Members(data, c[0], deltaKeys[:], d[:]) {
		return false
	}
	for _, j := range d[1:] {
		if !absent(data, j) {
			return false
		}
	}
	s, ok := jsonfast.StrIn(data, d[0])
	if !ok {
		return false
	}
	if s != "" {
		p.b.Append(p.switchTo(message.BlockText), s)
	}
	return true
}

func (p *chatParser) switchTo(kind string) int {
	if p.cur >= 0 && p.curKind == kind && p.b.IsOpen(p.cur) {
		return p.cur
	}
	if p.cur >= 0 && p.curKind != message.BlockToolCall {
		p.b.End(p.cur)
	}
	switch kind {
	case message.BlockText:
		p.cur = p.b.BeginText()
	case message.BlockThinking:
		p.cur = p.b.BeginThinking()
	}
	p.curKind = kind
	return p.cur
}

func (p *chatParser) choice(c *chatChoice) *provider.Error {
	d := &c.Delta
	var field string
	var reasoning *string
	switch {
	case d.ReasoningContent != nil && *d.ReasoningContent != "":
		field, reasoning = "reasoning_content", d.ReasoningContent
	case d.Reasoning != nil && *d.Reasoning != "":
		field, reasoning = "reasoning", d.Reasoning
	case d.ReasoningText != nil && *d.ReasoningText != "":
		field, reasoning = "reasoning_text", d.ReasoningText
	}
	if reasoning != nil {
		i := p.switchTo(message.BlockThinking)
		if p.b.Block(i).ThinkingSignature == "" {
			p.b.Block(i).ThinkingSignature = field
		}
		p.b.Append(i, *reasoning)
	}
	if d.Content != nil && *d.Content != "" {
		p.b.Append(p.switchTo(message.BlockText), *d.Content)
	}
	if d.Refusal != nil && *d.Refusal != "" {
		p.b.Append(p.switchTo(message.BlockText), *d.Refusal)
	}
	for _, tc := range d.ToolCalls {
		idx := 0
		if tc.Index != nil {
			idx = *tc.Index
		}
		bi, ok := p.toolIdx[idx]
		if ok && tc.ID != "" && p.b.Block(bi).ID != "" && p.b.Block(bi).ID != tc.ID {
			ok = false // a new call reusing the index
		}
		if !ok {
			if p.cur >= 0 && p.curKind != message.BlockToolCall {
				p.b.End(p.cur)
			}
			bi = p.b.BeginToolCall(tc.ID, tc.Function.Name)
			p.toolIdx[idx] = bi
			p.cur, p.curKind = bi, message.BlockToolCall
		} else {
			blk := p.b.Block(bi)
			if blk.ID == "" {
				blk.ID = tc.ID
			}
			if blk.Name == "" {
				blk.Name = tc.Function.Name
			}
		}
		if tc.Function.Arguments != nil {
			p.b.Append(bi, *tc.Function.Arguments)
		}
	}
	p.details = append(p.details, d.ReasoningDetails...)
	if c.Usage != nil {
		p.usage(c.Usage)
	}
	if c.FinishReason != nil && *c.FinishReason != "" {
		p.finish = *c.FinishReason
		if p.finish == "content_filter" {
			p.filtered = failover.StreamFilter(c.ContentFilterResults)
		}
	}
	return nil
}

func (p *chatParser) usage(u *chatUsage) {
	var cached, write, reasoning int64
	if d := u.PromptTokensDetails; d != nil {
		cached, write = d.CachedTokens, d.CacheWriteTokens
	}
	if cached == 0 {
		cached = u.PromptCacheHitTokens
	}
	if d := u.CompletionTokensDetails; d != nil {
		reasoning = d.ReasoningTokens
	}
	out := u.CompletionTokens
	// Some servers (xAI) count reasoning outside completion_tokens: their
	// total is prompt + completion + reasoning.
	if reasoning > 0 && u.TotalTokens == u.PromptTokens+u.CompletionTokens+reasoning {
		out += reasoning
	}
	in := u.PromptTokens - cached - write
	if in < 0 {
		in = 0
	}
	p.b.SetUsage(message.Usage{Input: in, Output: out, CacheRead: cached, CacheWrite: write})
}

// attachReasoningDetails puts OpenRouter's encrypted reasoning details on the
// tool calls they belong to (matched by id, else in order), so the next
// request can send them back.
func (p *chatParser) attachReasoningDetails() {
	if len(p.details) == 0 {
		return
	}
	var calls []*message.Block
	for i := 0; i < p.b.Len(); i++ {
		if blk := p.b.Block(i); blk.Type == message.BlockToolCall {
			calls = append(calls, blk)
		}
	}
	next := 0
	for _, d := range p.details {
		var h struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		}
		if json.Unmarshal(d, &h) != nil || h.Type != "reasoning.encrypted" {
			continue
		}
		var target *message.Block
		for _, c := range calls {
			if h.ID != "" && c.ID == h.ID {
				target = c
			}
		}
		for target == nil && next < len(calls) {
			if calls[next].ThoughtSignature == "" {
				target = calls[next]
			}
			next++
		}
		if target != nil {
			target.ThoughtSignature = string(d)
		}
	}
}

// Ended reports [DONE] (see adapter.Parser).
func (p *chatParser) Ended() bool { return p.finished }

// HasStop reports the finish_reason: a stall after it only loses the
// trailing usage or [DONE] (see adapter.Parser).
func (p *chatParser) HasStop() bool { return p.finish != "" }

// Outcome puts the reasoning details on their blocks and maps the
// finish_reason to the reply's stop reason (see adapter.Parser).
func (p *chatParser) Outcome() (message.StopReason, *provider.Error) {
	if p.finish == "" {
		return "", stream.Protocol("openai: stream ended before a finish_reason")
	}
	p.attachReasoningDetails()
	return p.stopReason()
}

// stopReason maps the finish_reason to the reply's stop reason.
func (p *chatParser) stopReason() (message.StopReason, *provider.Error) {
	switch p.finish {
	case "stop", "end", "eos":
		if p.b.HasToolCalls() {
			return message.StopToolUse, nil
		}
		return message.StopStop, nil
	case "length", "max_tokens", "model_length":
		return message.StopLength, nil
	case "tool_calls", "function_call":
		return message.StopToolUse, nil
	case "content_filter":
		msg := "openai: the reply was stopped by the provider's content filter"
		if p.filtered != "" {
			msg += " (" + p.filtered + ")"
		}
		return "", &provider.Error{Reason: provider.ReasonUnknown, Message: msg}
	case "error":
		return "", stream.Protocol("openai: finish_reason error without details")
	}
	return "", stream.Protocol("openai: unknown finish_reason %q", p.finish)
}
