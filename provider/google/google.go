// Package google adapts the Gemini API ("google-generative-ai",
// streamGenerateContent with alt=sse) to provider.Provider over net/http,
// with its own wire types for the request and the stream: thought
// signatures stay strings (Gemini sends base64, and Gemini 3's skip
// sentinel is not base64 at all). Every failure — an HTTP error, an error
// chunk, a malformed or truncated stream, a connection reset, a stall —
// ends as a classified *provider.Error. Thought signatures round-trip on
// thinking, text and function call parts; Gemini 3 function calls without
// one get the skip sentinel.
package google

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/adapter"
	"github.com/lanefleet/lanefleet/provider/internal/bodybuf"
	"github.com/lanefleet/lanefleet/provider/internal/jsonfast"
	"github.com/lanefleet/lanefleet/provider/internal/sse"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
)

// DefaultBaseURL is the Gemini API base URL (with API version) used when a
// model has none.
const DefaultBaseURL = "https://generativelanguage.googleapis.com/v1beta"

// Config configures the adapter (the fields every adapter shares: see
// adapter.Config). The zero value is usable.
type Config = adapter.Config

// Adapter streams Gemini generateContent.
type Adapter struct {
	client adapter.Client
	wire   *wireCache
	route  Route
}

// Route returns where the call of req goes and how it is authenticated:
// its base URL, path and headers (the body is the adapter's). An error
// fails the call; a *provider.Error fails it as it is.
type Route func(ctx context.Context, req *provider.Request) (adapter.Call, error)

// New returns a Gemini API adapter.
func New(cfg Config) *Adapter { return NewRouted("google", cfg, geminiAPI) }

// NewRouted returns an adapter that sends the Gemini API's request body
// where route says and reads its stream: the same wire API served
// elsewhere (Vertex AI). name prefixes its error messages.
func NewRouted(name string, cfg Config, route Route) *Adapter {
	return &Adapter{client: adapter.NewClient(name, cfg), wire: newWireCache(cfg.WireCacheBytes), route: route}
}

var _ provider.Provider = (*Adapter)(nil)

// Stream sends req and streams the reply (see provider.Provider). Failures
// return the partial message and a *provider.Error.
func (a *Adapter) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	return a.client.Run(ctx, req, emit, adapter.Spec{
		Build: func() (adapter.Call, error) { return build(ctx, req, a.wire, a.route) },
		Parse: func(b *stream.Builder) adapter.Parser {
			return &parser{b: b, cur: -1, ids: map[string]bool{}, nowMs: b.Timestamp()}
		},
	})
}

// Outcome maps the finish reason to the reply's stop reason (see
// adapter.Parser).
func (p *parser) Outcome() (message.StopReason, *provider.Error) {
	switch p.finish {
	case "":
		return "", stream.Protocol("google: stream ended before a finishReason")
	case finishStop:
		if p.b.HasToolCalls() {
			return message.StopToolUse, nil
		}
		return message.StopStop, nil
	case finishMaxTokens:
		return message.StopLength, nil
	case finishMalformedFunctionCall, finishUnexpectedToolCall:
		return "", &provider.Error{Reason: provider.ReasonFormat, Message: "google: finish reason " + p.finish + p.finishMessage()}
	}
	return "", &provider.Error{Reason: provider.ReasonUnknown, Message: "google: finish reason " + p.finish + p.finishMessage()}
}

// Ended is false: the stream has no terminal event, it ends with the body
// (see adapter.Parser).
func (p *parser) Ended() bool { return false }

// HasStop reports the finishReason: a stall after it only loses the
// trailing chunks (see adapter.Parser).
func (p *parser) HasStop() bool { return p.finish != "" }

// Finish reasons the adapter tells apart; any other ends the reply as an
// error carrying the reason.
const (
	finishStop                  = "STOP"
	finishMaxTokens             = "MAX_TOKENS"
	finishMalformedFunctionCall = "MALFORMED_FUNCTION_CALL"
	finishUnexpectedToolCall    = "UNEXPECTED_TOOL_CALL"
)

// endpoint returns the base URL with its API version: a base that ends in
// none gets /v1beta.
func endpoint(base string) string {
	if base == "" {
		base = DefaultBaseURL
	}
	base = strings.TrimRight(base, "/")
	if !strings.HasSuffix(base, "/v1beta") && !strings.HasSuffix(base, "/v1") && !strings.HasSuffix(base, "/v1alpha") {
		base += "/v1beta"
	}
	return base
}

// build builds the request of req: where route sends it, with the
// generateContent body.
func build(ctx context.Context, req *provider.Request, cache *wireCache, route Route) (adapter.Call, error) {
	call, err := route(ctx, req)
	if err != nil {
		return adapter.Call{}, err
	}
	body, err := buildRequest(req, cache)
	if err != nil {
		return adapter.Call{}, err
	}
	// The body buildRequest made for the call, which nothing else holds:
	// its buffer is given back once nothing reads it.
	call.Body, call.Done = body, bodybuf.Release(body)
	return call, nil
}

// geminiAPI routes a call to the model's streamGenerateContent under its
// base URL, with its key as a header.
func geminiAPI(_ context.Context, req *provider.Request) (adapter.Call, error) {
	h := http.Header{}
	if k := req.APIKey.Reveal(); k != "" {
		h.Set("x-goog-api-key", k)
	}
	path := "models/" + url.PathEscape(req.Model.ID) + ":streamGenerateContent?alt=sse"
	return adapter.Call{Base: endpoint(req.Model.BaseURL), Path: path, Header: h}, nil
}

type chunk struct {
	Candidates []struct {
		Content *struct {
			Parts []struct {
				Text             *string `json:"text"`
				Thought          bool    `json:"thought"`
				ThoughtSignature string  `json:"thoughtSignature"`
				FunctionCall     *struct {
					ID   string          `json:"id"`
					Name string          `json:"name"`
					Args json.RawMessage `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason  string `json:"finishReason"`
		FinishMessage string `json:"finishMessage"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount        int64 `json:"promptTokenCount"`
		CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
		ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
		CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
		TotalTokenCount         int64 `json:"totalTokenCount"`
	} `json:"usageMetadata"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	Error json.RawMessage `json:"error"`
}

type parser struct {
	b       *stream.Builder
	cur     int
	curKind string
	ids     map[string]bool
	counter int
	nowMs   int64
	finish  string
	finMsg  string
}

func (p *parser) finishMessage() string {
	if p.finMsg == "" {
		return ""
	}
	return ": " + p.finMsg
}

// Event applies one chunk of the stream (see adapter.Parser).
func (p *parser) Event(ev sse.Event) *provider.Error {
	if len(ev.Name) > 0 && string(ev.Name) != "message" {
		return stream.Protocol("google: unknown event type %q", ev.Name)
	}
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 {
		return nil
	}
	if p.fastText(data) {
		return nil
	}
	return p.decode(data)
}

// decode applies a chunk by decoding it whole: what fastText is not sure
// of.
func (p *parser) decode(data []byte) *provider.Error {
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return stream.Protocol("google: malformed chunk: %v", err)
	}
	if perr := stream.InBand(c.Error, data, "google: error in stream"); perr != nil {
		return perr
	}
	if c.PromptFeedback != nil && c.PromptFeedback.BlockReason != "" && len(c.Candidates) == 0 {
		return &provider.Error{Reason: provider.ReasonUnknown, Message: "google: prompt blocked: " + c.PromptFeedback.BlockReason}
	}
	if u := c.UsageMetadata; u != nil {
		p.b.SetUsage(message.Usage{
			Input:       max(u.PromptTokenCount-u.CachedContentTokenCount, 0),
			Output:      u.CandidatesTokenCount + u.ThoughtsTokenCount,
			CacheRead:   u.CachedContentTokenCount,
			TotalTokens: u.TotalTokenCount,
		})
	}
	if len(c.Candidates) == 0 {
		return nil
	}
	cand := c.Candidates[0]
	if cand.Content != nil {
		for _, part := range cand.Content.Parts {
			switch {
			case part.FunctionCall != nil:
				p.endCurrent()
				fc := part.FunctionCall
				id := fc.ID
				if id == "" || p.ids[id] {
					p.counter++
					id = fmt.Sprintf("%s_%d_%d", fc.Name, p.nowMs, p.counter)
				}
				p.ids[id] = true
				i := p.b.BeginToolCall(id, fc.Name)
				p.b.Block(i).ThoughtSignature = part.ThoughtSignature
				if len(fc.Args) > 0 && !bytes.Equal(fc.Args, []byte("null")) {
					p.b.Append(i, string(fc.Args))
				}
				p.b.End(i)
			case part.Text != nil:
				kind := message.BlockText
				if part.Thought {
					kind = message.BlockThinking
				}
				if *part.Text == "" && part.ThoughtSignature == "" {
					continue
				}
				i := p.switchTo(kind)
				p.b.Append(i, *part.Text)
				if part.ThoughtSignature != "" {
					blk := p.b.Block(i)
					if kind == message.BlockThinking {
						blk.ThinkingSignature = part.ThoughtSignature
					} else {
						blk.TextSignature = part.ThoughtSignature
					}
				}
			}
		}
	}
	if cand.FinishReason != "" {
		p.finish = cand.FinishReason
		p.finMsg = cand.FinishMessage
	}
	return nil
}

// The keys fastText reads (or must not find) at each level of a chunk, in
// the order it reads them.
var (
	chunkKeys   = []string{"candidates", "usageMetadata", "error"}
	candKeys    = []string{"content", "finishReason"}
	contentKeys = []string{"parts"}
	partKeys    = []string{"text", "thought", "thoughtSignature", "functionCall"}
	usageKeys   = []string{"promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount", "cachedContentTokenCount", "totalTokenCount"}
)

// fastText applies a chunk that carries one plain text part (and maybe
// usage) without reflection; false means the chunk needs the full decoder.
// It reads each field at its place in valid JSON (jsonfast.Members, one
// pass a level), and steps aside when the chunk or its part has anything
// the decoder would act on besides (an error, a finish reason, a thought,
// a function call, a second part) in any spelling the decoder matches:
// FuzzFastMatchesChunk holds it to what the decoder applies.
func (p *parser) fastText(data []byte) bool {
	if !jsonfast.Valid(data) {
		return false
	}
	var top [3]int
	if !jsonfast.Members(data, 0, chunkKeys, top[:]) || top[2] != jsonfast.Missing {
		return false
	}
	cand := jsonfast.Element(data, top[0], 0)
	var c [2]int
	if cand < 0 || !jsonfast.Members(data, cand, candKeys, c[:]) || c[1] != jsonfast.Missing {
		return false
	}
	var parts [1]int
	if c[0] < 0 || !jsonfast.Members(data, c[0], contentKeys, parts[:]) || parts[0] < 0 {
		return false
	}
	part := jsonfast.Element(data, parts[0], 0)
	if part < 0 || jsonfast.Element(data, parts[0], 1) != jsonfast.Missing {
		return false
	}
	var pk [4]int
	if !jsonfast.Members(data, part, partKeys, pk[:]) || pk[1] != jsonfast.Missing || pk[2] != jsonfast.Missing || pk[3] != jsonfast.Missing {
		return false
	}
	text, ok := jsonfast.StrIn(data, pk[0])
	if !ok {
		return false
	}
	if top[1] != jsonfast.Missing {
		var u, counts [5]int
		if !jsonfast.Members(data, top[1], usageKeys, u[:]) {
			return false
		}
		for i, j := range u {
			if counts[i], ok = jsonfast.IntIn(data, j); !ok {
				return false
			}
		}
		p.b.SetUsage(message.Usage{
			Input: int64(max(counts[0]-counts[3], 0)), Output: int64(counts[1] + counts[2]), CacheRead: int64(counts[3]), TotalTokens: int64(counts[4]),
		})
	}
	if text != "" {
		p.b.Append(p.switchTo(message.BlockText), text)
	}
	return true
}

func (p *parser) endCurrent() {
	if p.cur >= 0 {
		p.b.End(p.cur)
		p.cur = -1
	}
}

func (p *parser) switchTo(kind string) int {
	if p.cur >= 0 && p.curKind == kind && p.b.IsOpen(p.cur) {
		return p.cur
	}
	p.endCurrent()
	if kind == message.BlockThinking {
		p.cur = p.b.BeginThinking()
	} else {
		p.cur = p.b.BeginText()
	}
	p.curKind = kind
	return p.cur
}
