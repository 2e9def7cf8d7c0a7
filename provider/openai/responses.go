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

// Responses streams the Responses API ("openai-responses"). Reasoning items
// (with their encrypted content) are kept whole in the thinking block's
// signature and sent back verbatim; tool call ids are stored as
// "call_id|item_id".
type Responses struct {
	client adapter.Client
	wire   *respWireCache
	route  Route
}

// NewResponses returns a Responses adapter.
func NewResponses(cfg Config) *Responses { return NewResponsesRouted("openai", cfg, openAIRoute) }

// NewResponsesRouted returns a Responses adapter whose calls go where
// route says: the same wire API served elsewhere (Azure OpenAI). name
// prefixes its error messages.
func NewResponsesRouted(name string, cfg Config, route Route) *Responses {
	return &Responses{client: adapter.NewClient(name, cfg), wire: newRespWireCache(cfg.WireCacheBytes), route: route}
}

var _ provider.Provider = (*Responses)(nil)

// Stream sends req and streams the reply (see provider.Provider). Failures
// return the partial message and a *provider.Error.
func (r *Responses) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	return r.client.Run(ctx, req, emit, adapter.Spec{
		Build: func() (adapter.Call, error) {
			return routed(ctx, req, r.route, "responses", buildResponsesRequest, r.wire)
		},
		Parse: func(b *stream.Builder) adapter.Parser {
			return &respParser{b: b, items: map[int]int{}, parts: map[int]int{}, model: req.Model}
		},
	})
}

// Ended reports the response's terminal event (see adapter.Parser).
func (p *respParser) Ended() bool { return p.stop != "" }

// HasStop is false: the stop reason arrives with the terminal event, so
// nothing the reply needs can follow it (see adapter.Parser).
func (p *respParser) HasStop() bool { return false }

// Outcome is the stop reason of the terminal event; a reply that ends for
// "stop" with tool calls stops for them (see adapter.Parser).
func (p *respParser) Outcome() (message.StopReason, *provider.Error) {
	if p.stop == "" {
		return "", stream.Protocol("openai: stream ended before response.completed")
	}
	if p.stop == message.StopStop && p.b.HasToolCalls() {
		return message.StopToolUse, nil
	}
	return p.stop, nil
}

type respEvent struct {
	Type        string          `json:"type"`
	OutputIndex int             `json:"output_index"`
	Delta       string          `json:"delta"`
	Arguments   *string         `json:"arguments"`
	Item        json.RawMessage `json:"item"`
	Response    *respResponse   `json:"response"`
}

type respItem struct {
	Type      string  `json:"type"`
	ID        string  `json:"id"`
	CallID    string  `json:"call_id"`
	Name      string  `json:"name"`
	Arguments *string `json:"arguments"`
	Phase     string  `json:"phase"`
}

type respResponse struct {
	Status            string          `json:"status"`
	ServiceTier       string          `json:"service_tier"`
	Error             json.RawMessage `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Usage *struct {
		InputTokens        int64 `json:"input_tokens"`
		OutputTokens       int64 `json:"output_tokens"`
		TotalTokens        int64 `json:"total_tokens"`
		InputTokensDetails *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

type respParser struct {
	b     *stream.Builder
	model provider.Model
	items map[int]int // output_index → block index
	parts map[int]int // output_index → summary parts seen
	stop  message.StopReason
}

// ignoredEvents carry nothing the message needs.
var ignoredEvents = map[string]bool{
	"response.created": true, "response.in_progress": true, "response.queued": true,
	"response.content_part.added": true, "response.content_part.done": true,
	"response.output_text.done": true, "response.refusal.done": true,
	"response.reasoning_summary_part.done": true, "response.reasoning_summary_text.done": true,
	"response.reasoning_text.done": true, "response.output_text.annotation.added": true,
	"keepalive": true, "ping": true,
}

func (p *respParser) block(idx int, kind string) int {
	if i, ok := p.items[idx]; ok && p.b.IsOpen(i) {
		return i
	}
	var i int
	if kind == message.BlockThinking {
		i = p.b.BeginThinking()
	} else {
		i = p.b.BeginText()
	}
	p.items[idx] = i
	return i
}

// Event applies one event of the stream (see adapter.Parser).
func (p *respParser) Event(ev sse.Event) *provider.Error {
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 {
		return nil
	}
	name := string(ev.Name)
	if p.fastDelta(name, data) || p.fastOther(name, data) {
		return nil
	}
	return p.decode(name, data)
}

// respEventKeys and respResponseKeys are the fields of
// response.completed, and of its response, that fastOther reads.
var (
	respEventKeys    = [...]string{"response"}
	respResponseKeys = [...]string{"usage", "service_tier"}
)

// fastOther applies, without decoding them whole, the events that echo
// the whole response (its instructions, tools and, at the end, every
// output item again), which decoding spent most of a short reply's time
// on: an ignored event is only checked, and response.completed's usage
// and service tier are read at their place and decoded alone. False
// leaves the event to decode; FuzzFastMatchesOther holds it to decode.
func (p *respParser) fastOther(name string, data []byte) bool {
	if name == "" || name != "response.completed" && !ignoredEvents[name] {
		return false
	}
	if !jsonfast.Valid(data) {
		return false
	}
	if name != "response.completed" {
		return true // decode would only check it (and its fields' types)
	}
	var top [1]int
	if !jsonfast.Members(data, 0, respEventKeys[:], top[:]) {
		return false
	}
	var r respResponse
	if top[0] != jsonfast.Missing {
		var pos [len(respResponseKeys)]int
		if !jsonfast.Members(data, top[0], respResponseKeys[:], pos[:]) {
			return false // null, or not sure: decode says
		}
		if pos[0] != jsonfast.Missing {
			if err := json.Unmarshal(data[pos[0]:jsonfast.End(data, pos[0])], &r.Usage); err != nil {
				return false
			}
		}
		if pos[1] != jsonfast.Missing {
			tier, ok := jsonfast.StrIn(data, pos[1])
			if !ok {
				return false
			}
			r.ServiceTier = tier
		}
	}
	p.usage(&r)
	p.stop = message.StopStop
	return true
}

// decode applies an event by decoding it whole: what fastDelta is not
// sure of.
func (p *respParser) decode(name string, data []byte) *provider.Error {
	var e respEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return stream.Protocol("openai: malformed %s event: %v", name, err)
	}
	if name == "" {
		name = e.Type
	}
	switch name {
	case "error":
		return failover.FromStream(data, errors.New("openai: error event"))
	case "response.output_item.added":
		return p.itemAdded(&e)
	case "response.reasoning_summary_part.added":
		i := p.block(e.OutputIndex, message.BlockThinking)
		if p.parts[e.OutputIndex] > 0 {
			p.b.Append(i, "\n\n")
		}
		p.parts[e.OutputIndex]++
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		p.b.Append(p.block(e.OutputIndex, message.BlockThinking), e.Delta)
	case "response.output_text.delta", "response.refusal.delta":
		p.b.Append(p.block(e.OutputIndex, message.BlockText), e.Delta)
	case "response.function_call_arguments.delta":
		if i, ok := p.items[e.OutputIndex]; ok {
			p.b.Append(i, e.Delta)
		}
	case "response.function_call_arguments.done":
		if i, ok := p.items[e.OutputIndex]; ok && e.Arguments != nil {
			p.b.SetArgs(i, *e.Arguments)
		}
	case "response.output_item.done":
		return p.itemDone(&e)
	case "response.completed":
		p.usage(e.Response)
		p.stop = message.StopStop
	case "response.incomplete":
		p.usage(e.Response)
		if e.Response != nil && e.Response.IncompleteDetails != nil && e.Response.IncompleteDetails.Reason == "content_filter" {
			return &provider.Error{Reason: provider.ReasonUnknown, Message: "openai: response incomplete: content_filter"}
		}
		p.stop = message.StopLength
	case "response.failed", "response.cancelled":
		if e.Response != nil {
			p.usage(e.Response)
			if len(e.Response.Error) > 0 && !bytes.Equal(e.Response.Error, []byte("null")) {
				body := append(append([]byte(`{"error":`), e.Response.Error...), '}')
				return failover.FromStream(body, errors.New("openai: "+name))
			}
		}
		return stream.Protocol("openai: %s without an error", name)
	default:
		if !ignoredEvents[name] {
			return stream.Protocol("openai: unknown event type %q", name)
		}
	}
	return nil
}

// respDeltaKeys are the fields fastDelta reads.
var respDeltaKeys = [...]string{"output_index", "delta"}

// fastDelta appends a text or reasoning summary delta without decoding
// the whole event, the most frequent kind by far; false leaves the event
// to the full decoding. It reads the two fields at their place in valid
// JSON (jsonfast.Members): FuzzFastMatchesEvent holds it to decode.
func (p *respParser) fastDelta(name string, data []byte) bool {
	if name != "response.output_text.delta" && name != "response.reasoning_summary_text.delta" {
		return false
	}
	var pos [len(respDeltaKeys)]int
	if !jsonfast.Valid(data) || !jsonfast.Members(data, 0, respDeltaKeys[:], pos[:]) {
		return false
	}
	idx, ok := jsonfast.IntIn(data, pos[0])
	if !ok {
		return false
	}
	d, ok := jsonfast.StrIn(data, pos[1])
	if !ok {
		return false
	}
	kind := message.BlockText
	if name != "response.output_text.delta" {
		kind = message.BlockThinking
	}
	p.b.Append(p.block(idx, kind), d)
	return true
}

// itemAdded opens the block of an output item: reasoning, a message or a
// function call (with the arguments it comes with).
func (p *respParser) itemAdded(e *respEvent) *provider.Error {
	var it respItem
	if err := json.Unmarshal(e.Item, &it); err != nil {
		return stream.Protocol("openai: malformed output item: %v", err)
	}
	switch it.Type {
	case "reasoning":
		p.items[e.OutputIndex] = p.b.BeginThinking()
	case "message":
		p.items[e.OutputIndex] = p.b.BeginText()
	case "function_call":
		i := p.b.BeginToolCall(it.CallID+"|"+it.ID, it.Name)
		p.items[e.OutputIndex] = i
		if it.Arguments != nil && *it.Arguments != "" {
			p.b.Append(i, *it.Arguments)
		}
	}
	return nil
}

// itemDone ends an output item's block with what the provider needs back
// next time: the reasoning item, the message's id and phase, or the
// function call's final arguments.
func (p *respParser) itemDone(e *respEvent) *provider.Error {
	var it respItem
	if err := json.Unmarshal(e.Item, &it); err != nil {
		return stream.Protocol("openai: malformed output item: %v", err)
	}
	i, ok := p.items[e.OutputIndex]
	if !ok {
		return nil
	}
	blk := p.b.Block(i)
	switch it.Type {
	case "reasoning":
		blk.ThinkingSignature = string(e.Item)
	case "message":
		sig, _ := json.Marshal(textSig{V: 1, ID: it.ID, Phase: it.Phase})
		blk.TextSignature = string(sig)
	case "function_call":
		if it.Arguments != nil && p.b.IsOpen(i) {
			p.b.SetArgs(i, *it.Arguments)
		}
	}
	p.b.End(i)
	return nil
}

func (p *respParser) usage(r *respResponse) {
	if r == nil || r.Usage == nil {
		return
	}
	u := r.Usage
	var cached int64
	if u.InputTokensDetails != nil {
		cached = u.InputTokensDetails.CachedTokens
	}
	mu := message.Usage{Input: max(u.InputTokens-cached, 0), Output: u.OutputTokens, CacheRead: cached, TotalTokens: u.TotalTokens}
	p.b.SetUsage(mu)
	if mult := tierMultiplier(r.ServiceTier); mult != 1 {
		got := p.b.Usage()
		got.Cost.Input *= mult
		got.Cost.Output *= mult
		got.Cost.CacheRead *= mult
		got.Cost.CacheWrite *= mult
		got.Cost.Total *= mult
	}
}

// tierMultiplier is the price factor of a service tier (flex half price,
// priority double).
func tierMultiplier(tier string) float64 {
	switch tier {
	case "flex":
		return 0.5
	case "priority":
		return 2
	}
	return 1
}
