// Package anthropic adapts the Anthropic Messages API ("anthropic-messages")
// to provider.Provider over net/http: POST {base}/v1/messages with the
// headers anthropic-sdk-go used to send (x-api-key or an OAuth bearer,
// anthropic-version, anthropic-beta), no retries (the run loop owns them)
// and keys only from the request. The SSE body is decoded here, so every
// failure — an HTTP error, an error event, a malformed or truncated stream,
// a connection reset, a stall, an unknown event — ends as a classified
// *provider.Error. Thinking signatures and redacted thinking round-trip byte
// for byte; the system prompt and the last user message carry prompt-cache
// breakpoints.
//
// anthropic.go holds the adapter and the stream's parser; request.go
// builds the body; wirecache.go keeps sessions' encoded messages;
// oauth.go holds OAuth, the access tokens of Claude subscription profiles
// refreshed through Anthropic's token endpoint as fleet state.
package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
	"github.com/lanefleet/lanefleet/provider/internal/adapter"
	"github.com/lanefleet/lanefleet/provider/internal/bodybuf"
	"github.com/lanefleet/lanefleet/provider/internal/jsonfast"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// DefaultBaseURL is the Anthropic API base URL used when a model has none.
const DefaultBaseURL = "https://api.anthropic.com"

// APIVersion is the anthropic-version header of every request: the version
// anthropic-sdk-go v2.13.0 sent, which the adapter's requests and stream
// decoding were written against.
const APIVersion = "2026-10-21"

// Config configures the adapter (the fields every adapter shares: see
// adapter.Config). The zero value is usable.
type Config = adapter.Config

// Adapter streams Anthropic Messages.
type Adapter struct {
	client adapter.Client
	wire   *wireCache
	route  Route
}

// Route says where an adapter's calls go and what their body names.
type Route struct {
	// Version, when set, is sent in the body as anthropic_version and the
	// model is left out of the body, its URL naming it (Anthropic on
	// Vertex AI); empty sends the Messages API's body.
	Version string
	// Target returns where the call of req goes and how it is
	// authenticated: its base URL, path and headers (the body is the
	// adapter's); betas are the beta features the body uses. An error
	// fails the call; a *provider.Error fails it as it is.
	Target func(ctx context.Context, req *provider.Request, betas []string) (adapter.Call, error)
}

// New returns an Anthropic Messages adapter.
func New(cfg Config) *Adapter {
	return NewRouted("anthropic", cfg, Route{Target: messagesAPI})
}

// NewRouted returns an adapter that sends the Messages API's request
// where r says and reads its stream: the same wire API served elsewhere
// (Vertex AI's rawPredict). name prefixes its error messages.
func NewRouted(name string, cfg Config, r Route) *Adapter {
	return &Adapter{client: adapter.NewClient(name, cfg), wire: newWireCache(cfg.WireCacheBytes), route: r}
}

var _ provider.Provider = (*Adapter)(nil)

// Stream sends req and streams the reply (see provider.Provider). Failures
// return the partial message and a *provider.Error.
func (a *Adapter) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	return a.client.Run(ctx, req, emit, adapter.Spec{
		Build: func() (adapter.Call, error) { return build(ctx, req, a.wire, a.route) },
		Parse: func(b *stream.Builder) adapter.Parser { return &parser{b: b, blocks: map[int]int{}} },
	})
}

// build builds the request of req: its body, sent where r says.
func build(ctx context.Context, req *provider.Request, cache *wireCache, r Route) (adapter.Call, error) {
	body, betas, err := buildRequest(req, cache, r.Version)
	if err != nil {
		return adapter.Call{}, err
	}
	call, err := r.Target(ctx, req, betas)
	if err != nil {
		return adapter.Call{}, err
	}
	// The body buildRequest made for the call, which nothing else holds:
	// its buffer is given back once nothing reads it.
	call.Body, call.Done = body, bodybuf.Release(body)
	return call, nil
}

// messagesAPI routes a call to the Messages API under the model's base
// URL, with its credentials and betas.
func messagesAPI(_ context.Context, req *provider.Request, betas []string) (adapter.Call, error) {
	base := req.Model.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	h := http.Header{}
	h.Set("anthropic-version", APIVersion)
	key := req.APIKey.Reveal()
	switch {
	case strings.Contains(key, "sk-ant-oat"):
		// An OAuth token (Claude subscriptions) authenticates as a bearer.
		h.Set("authorization", "Bearer "+key)
		betas = append(betas, "oauth-2025-04-20")
	case key != "":
		h.Set("x-api-key", key)
	}
	if len(betas) > 0 {
		h.Set("anthropic-beta", strings.Join(betas, ","))
	}
	return adapter.Call{Base: base, Path: "v1/messages", Header: h}, nil
}

// Outcome maps the stop reason to the reply's (see adapter.Parser).
func (p *parser) Outcome() (message.StopReason, *provider.Error) {
	switch p.stopReason {
	case "":
		return "", stream.Protocol("anthropic: stream ended before message_stop")
	case "end_turn", "pause_turn", "stop_sequence":
		return message.StopStop, nil
	case "max_tokens":
		return message.StopLength, nil
	case "tool_use":
		return message.StopToolUse, nil
	case "model_context_window_exceeded":
		return "", &provider.Error{Reason: provider.ReasonContextOverflow, Message: "anthropic: stop reason model_context_window_exceeded"}
	case "refusal":
		return "", &provider.Error{Reason: provider.ReasonUnknown, Message: "anthropic: the model refused to answer (stop reason refusal)"}
	}
	return "", &provider.Error{Reason: provider.ReasonUnknown, Message: "anthropic: unhandled stop reason: " + p.stopReason}
}

// Ended reports message_stop (see adapter.Parser).
func (p *parser) Ended() bool { return p.stopped }

// HasStop reports message_delta's stop reason: a stall after it only
// loses message_stop (see adapter.Parser).
func (p *parser) HasStop() bool { return p.stopReason != "" }

// event is the union of the stream's event payloads.
type event struct {
	Type    string `json:"type"`
	Message *struct {
		Usage *apiUsage `json:"usage"`
	} `json:"message"`
	Index        int `json:"index"`
	ContentBlock *struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		Thinking  string          `json:"thinking"`
		Signature string          `json:"signature"`
		Data      string          `json:"data"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
	} `json:"content_block"`
	Delta *struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		Thinking    string  `json:"thinking"`
		Signature   string  `json:"signature"`
		PartialJSON string  `json:"partial_json"`
		StopReason  *string `json:"stop_reason"`
	} `json:"delta"`
	Usage *apiUsage `json:"usage"`
}

type apiUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
}

type parser struct {
	b          *stream.Builder
	blocks     map[int]int // wire index → block index
	usage      message.Usage
	stopReason string
	stopped    bool
}

func (p *parser) setUsage(u *apiUsage) {
	if u == nil {
		return
	}
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&p.usage.Input, u.InputTokens)
	set(&p.usage.Output, u.OutputTokens)
	set(&p.usage.CacheRead, u.CacheReadInputTokens)
	set(&p.usage.CacheWrite, u.CacheCreationInputTokens)
	u2 := p.usage
	u2.TotalTokens = 0
	p.b.SetUsage(u2)
}

// The keys fastDelta reads: the event's, and its delta's (the type, then
// the field carrying each of fastTypes' text, in order).
var (
	topKeys   = [...]string{"index", "delta"}
	deltaKeys = [...]string{"type", "text", "thinking", "partial_json"}
	fastTypes = [...][]byte{[]byte(`"text_delta"`), []byte(`"thinking_delta"`), []byte(`"input_json_delta"`)}
)

// fastDelta applies the common delta events without reflection; false means
// the event needs the full decoder. It reads each field at its place in
// valid JSON (jsonfast.Members), so a key repeated in a nested object, a twin
// or an escaped spelling sends the event to the decoder, and
// FuzzFastMatchesEvent holds it to what the decoder applies.
func (p *parser) fastDelta(data []byte) bool {
	if !jsonfast.Valid(data) {
		return false
	}
	var top [2]int
	var delta [len(deltaKeys)]int
	if !jsonfast.Members(data, 0, topKeys[:], top[:]) || !jsonfast.Members(data, top[1], deltaKeys[:], delta[:]) {
		return false
	}
	idx, ok := jsonfast.IntIn(data, top[0])
	if !ok {
		return false
	}
	i, ok := p.blocks[idx]
	if !ok || delta[0] < 0 {
		return false
	}
	key := -1
	for k, typ := range fastTypes {
		if bytes.HasPrefix(data[delta[0]:], typ) { // the whole string: its closing quote is no escape
			key = k + 1
		}
	}
	if key < 0 {
		return false
	}
	s, ok := jsonfast.StrIn(data, delta[key])
	if !ok {
		return false
	}
	p.b.Append(i, s)
	return true
}

// Event applies one event of the stream (see adapter.Parser).
func (p *parser) Event(ev sse.Event) *provider.Error {
	data := bytes.TrimSpace(ev.Data)
	// The name is compared as bytes until the fast path has passed: a
	// string of it escapes below, one allocation per delta otherwise.
	if string(ev.Name) == "error" {
		return failover.FromStream(data, errors.New("anthropic: error event"))
	}
	if len(data) == 0 {
		return nil
	}
	if string(ev.Name) == "content_block_delta" && p.fastDelta(data) {
		return nil
	}
	name := string(ev.Name)
	var e event
	if err := json.Unmarshal(data, &e); err != nil {
		return stream.Protocol("anthropic: malformed %s event: %v", name, err)
	}
	if name == "" {
		name = e.Type
	}
	switch name {
	case "ping":
	case "message_start":
		if e.Message != nil {
			p.setUsage(e.Message.Usage)
		}
	case "content_block_start":
		return p.blockStart(&e)
	case "content_block_delta":
		return p.blockDelta(&e)
	case "content_block_stop":
		if i, ok := p.blocks[e.Index]; ok {
			p.b.End(i)
		}
	case "message_delta":
		if e.Delta != nil && e.Delta.StopReason != nil {
			p.stopReason = *e.Delta.StopReason
		}
		p.setUsage(e.Usage)
	case "message_stop":
		p.stopped = true
		if p.stopReason == "" {
			return stream.Protocol("anthropic: message_stop without a stop reason")
		}
	default:
		return stream.Protocol("anthropic: unknown event type %q", name)
	}
	return nil
}

// blockStart opens a content block: text, thinking (redacted too) or a
// tool call with the input it comes with.
func (p *parser) blockStart(e *event) *provider.Error {
	cb := e.ContentBlock
	if cb == nil {
		return stream.Protocol("anthropic: content_block_start without content_block")
	}
	var i int
	switch cb.Type {
	case "text":
		i = p.b.BeginText()
		p.b.Append(i, cb.Text)
	case "thinking":
		i = p.b.BeginThinking()
		p.b.Append(i, cb.Thinking)
		p.b.Block(i).ThinkingSignature = cb.Signature
	case "redacted_thinking":
		i = p.b.BeginThinking()
		blk := p.b.Block(i)
		blk.Redacted = true
		blk.ThinkingSignature = cb.Data
		p.b.Append(i, "[Reasoning redacted]")
	case "tool_use", "server_tool_use":
		i = p.b.BeginToolCall(cb.ID, cb.Name)
		if in := bytes.TrimSpace(cb.Input); len(in) > 0 && !bytes.Equal(in, []byte("{}")) && !bytes.Equal(in, []byte("null")) {
			p.b.SetArgs(i, string(in))
		}
	default:
		return stream.Protocol("anthropic: unknown content block type %q", cb.Type)
	}
	p.blocks[e.Index] = i
	return nil
}

// blockDelta appends a delta to its open block; a signature delta extends
// the thinking block's signature.
func (p *parser) blockDelta(e *event) *provider.Error {
	i, ok := p.blocks[e.Index]
	if !ok || e.Delta == nil {
		return stream.Protocol("anthropic: delta for unknown block %d", e.Index)
	}
	switch e.Delta.Type {
	case "text_delta":
		p.b.Append(i, e.Delta.Text)
	case "thinking_delta":
		p.b.Append(i, e.Delta.Thinking)
	case "signature_delta":
		p.b.Block(i).ThinkingSignature += e.Delta.Signature
	case "input_json_delta":
		p.b.Append(i, e.Delta.PartialJSON)
	case "citations_delta":
	default:
		return stream.Protocol("anthropic: unknown delta type %q", e.Delta.Type)
	}
	return nil
}
