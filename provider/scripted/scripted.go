// Package scripted is Lanefleet's built-in deterministic model provider, for
// the demo, tests and benchmarks. It speaks the same streaming protocol as the
// real adapters.
//
// Models (provider "scripted"):
//
//   - scripted/echo: streams "echo: <last user text>" back, one delta per word.
//   - scripted/script: plays the script given in the last user message, which
//     starts with "#script " followed by a JSON Script. Each model call plays
//     the next reply: the first call of a turn plays replies[0], the call after
//     a tool round plays replies[1], and so on.
//   - scripted/<name>: plays a named script from Config.Scripts.
package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// ProviderName is the provider key of scripted models.
const ProviderName = "scripted"

// API is the wire API name scripted models report.
const API = "scripted"

// ScriptPrefix starts a user message that carries an inline script.
const ScriptPrefix = "#script "

// Script is a sequence of replies, one per model call within a turn.
type Script struct {
	Replies []Reply `json:"replies"`
}

// Reply is one scripted model response.
type Reply struct {
	Text       string         `json:"text,omitempty"`
	Thinking   string         `json:"thinking,omitempty"`
	Chunks     int            `json:"chunks,omitempty"`  // deltas the text is split into; default 4
	DelayMs    int            `json:"delayMs,omitempty"` // pause before each delta
	ToolCalls  []ToolCall     `json:"toolCalls,omitempty"`
	StopReason string         `json:"stopReason,omitempty"` // default stop, or toolUse with tool calls
	Error      *ScriptedError `json:"error,omitempty"`      // fail the call (after streaming Text, if any)
	Usage      *message.Usage `json:"usage,omitempty"`

	byWord bool // echo: one delta per word
}

// ToolCall is a scripted tool call.
type ToolCall struct {
	ID        string         `json:"id,omitempty"`
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments,omitempty"`
}

// ScriptedError is a scripted provider failure.
type ScriptedError struct {
	Reason       provider.Reason `json:"reason,omitempty"` // default from Status
	Status       int             `json:"status,omitempty"`
	Message      string          `json:"message"`
	RetryAfterMs int             `json:"retryAfterMs,omitempty"`
}

// Config configures the provider.
type Config struct {
	// Delay is the pause before each echo delta (0 = instant, for benchmarks).
	Delay time.Duration
	// Chunks is how many deltas an echo reply is split into; default 4.
	Chunks int
	// Scripts are named scripts served as scripted/<name>.
	Scripts map[string]Script
	// Now returns the current time; default time.Now.
	Now func() time.Time
}

// Provider is the scripted provider.
type Provider struct{ cfg Config }

// New returns a scripted provider.
func New(cfg Config) *Provider {
	if cfg.Chunks <= 0 {
		cfg.Chunks = 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Provider{cfg: cfg}
}

// Model returns the catalog entry of a scripted model id.
func Model(id string) provider.Model {
	return provider.Model{ID: id, Provider: ProviderName, API: API, ContextWindow: 200000, MaxTokens: 32000, Input: []string{"text", "image"}}
}

// Serves reports whether p plays model id: echo, script, or a script of
// Config.Scripts. Another id fails every call with model_not_found.
func (p *Provider) Serves(id string) bool {
	_, named := p.cfg.Scripts[id]
	return id == "echo" || id == "script" || named
}

// ErrBadScript is returned for an inline script that does not parse.
var ErrBadScript = errors.New("scripted: bad script")

// Stream plays the reply for this call.
func (p *Provider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	out := message.Message{Role: message.RoleAssistant, API: API, Provider: ProviderName, Model: req.Model.ID,
		Content: message.BlocksOf(), Timestamp: p.cfg.Now().UnixMilli()}
	userText, calls := lastUser(req.Messages)
	var reply Reply
	switch id := req.Model.ID; {
	case id == "echo":
		reply = Reply{Text: "echo: " + userText, Chunks: p.cfg.Chunks, DelayMs: -1, byWord: true}
	case id == "script":
		s, err := parseInline(userText)
		if err != nil {
			return p.fail(&out, emit, &provider.Error{Reason: provider.ReasonFormat, Message: err.Error(), Err: err})
		}
		reply = pick(s, calls)
	default:
		s, ok := p.cfg.Scripts[id]
		if !ok {
			err := &provider.Error{Reason: provider.ReasonModelNotFound, Status: 404, Message: fmt.Sprintf("scripted model %q not found (echo, script, or a configured script)", id)}
			return p.fail(&out, emit, err)
		}
		reply = pick(s, calls)
	}
	return p.play(ctx, req, &out, reply, emit)
}

// lastUser returns the last user message's text and how many assistant
// messages follow it (the call index within the turn).
func lastUser(msgs []message.Message) (string, int) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == message.RoleUser {
			n := 0
			for _, m := range msgs[i+1:] {
				if m.Role == message.RoleAssistant {
					n++
				}
			}
			return msgs[i].Content.Text(), n
		}
	}
	return "", 0
}

func parseInline(text string) (Script, error) {
	body, ok := strings.CutPrefix(strings.TrimSpace(text), ScriptPrefix)
	if !ok {
		return Script{}, fmt.Errorf("%w: the last user message must start with %q", ErrBadScript, ScriptPrefix)
	}
	var s Script
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Script{}, fmt.Errorf("%w: %v", ErrBadScript, err)
	}
	if len(s.Replies) == 0 {
		return Script{}, fmt.Errorf("%w: no replies", ErrBadScript)
	}
	return s, nil
}

// pick returns reply i, repeating the last one when the script runs out.
func pick(s Script, i int) Reply {
	if len(s.Replies) == 0 {
		return Reply{Text: ""}
	}
	return s.Replies[min(i, len(s.Replies)-1)]
}

func (p *Provider) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Provider) play(ctx context.Context, req *provider.Request, out *message.Message, r Reply, emit func(provider.Event)) (message.Message, error) {
	delay := time.Duration(r.DelayMs) * time.Millisecond
	if r.DelayMs < 0 {
		delay = p.cfg.Delay
	}
	emit(provider.Event{Type: provider.EventStart})
	if r.Thinking != "" {
		idx := len(out.Content.Blocks)
		out.Content.Blocks = append(out.Content.Blocks, message.Thinking("", "scripted-signature"))
		emit(provider.Event{Type: provider.EventThinkingStart, ContentIndex: idx})
		out.Content.Blocks[idx].Thinking = r.Thinking
		emit(provider.Event{Type: provider.EventThinkingDelta, ContentIndex: idx, Delta: r.Thinking})
		emit(provider.Event{Type: provider.EventThinkingEnd, ContentIndex: idx, Content: r.Thinking})
	}
	if r.Text != "" {
		idx := len(out.Content.Blocks)
		out.Content.Blocks = append(out.Content.Blocks, message.Text(""))
		emit(provider.Event{Type: provider.EventTextStart, ContentIndex: idx})
		var sb strings.Builder
		parts := split(r.Text, max(r.Chunks, 1))
		if r.byWord {
			parts = words(r.Text)
		}
		for _, part := range parts {
			if err := p.sleep(ctx, delay); err != nil {
				out.Content.Blocks[idx].Text = sb.String()
				return p.abort(out, emit, err)
			}
			sb.WriteString(part)
			emit(provider.Event{Type: provider.EventTextDelta, ContentIndex: idx, Delta: part})
		}
		out.Content.Blocks[idx].Text = sb.String()
		emit(provider.Event{Type: provider.EventTextEnd, ContentIndex: idx, Content: sb.String()})
	} else if err := p.sleep(ctx, delay); err != nil {
		return p.abort(out, emit, err)
	}
	if r.Error != nil {
		e := &provider.Error{Reason: r.Error.Reason, Status: r.Error.Status, Message: r.Error.Message,
			RetryAfter: time.Duration(r.Error.RetryAfterMs) * time.Millisecond}
		if e.Reason == "" {
			e.Reason = reasonOfStatus(r.Error.Status)
		}
		return p.fail(out, emit, e)
	}
	for i, tc := range r.ToolCalls {
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", len(req.Messages), i)
		}
		args := tc.Arguments
		if args == nil {
			args = map[string]any{}
		}
		idx := len(out.Content.Blocks)
		b := message.ToolCall(id, tc.Name, args)
		out.Content.Blocks = append(out.Content.Blocks, b)
		raw, _ := json.Marshal(args)
		emit(provider.Event{Type: provider.EventToolCallStart, ContentIndex: idx})
		emit(provider.Event{Type: provider.EventToolCallDelta, ContentIndex: idx, Delta: string(raw)})
		emit(provider.Event{Type: provider.EventToolCallEnd, ContentIndex: idx, ToolCall: &b})
	}
	out.StopReason = message.StopStop
	if len(r.ToolCalls) > 0 {
		out.StopReason = message.StopToolUse
	}
	if r.StopReason != "" {
		out.StopReason = message.StopReason(r.StopReason)
	}
	u := estimateUsage(req, out)
	if r.Usage != nil {
		u = *r.Usage
	}
	out.Usage = &u
	done := *out
	emit(provider.Event{Type: provider.EventDone, Reason: out.StopReason, Message: &done})
	return *out, nil
}

func reasonOfStatus(status int) provider.Reason {
	switch {
	case status == 429:
		return provider.ReasonRateLimit
	case status == 401 || status == 403:
		return provider.ReasonAuth
	case status == 402:
		return provider.ReasonBilling
	case status == 404:
		return provider.ReasonModelNotFound
	case status == 408 || status == 504:
		return provider.ReasonTimeout
	case status == 529 || status == 503 || status >= 500:
		return provider.ReasonOverloaded
	case status == 400 || status == 422:
		return provider.ReasonFormat
	}
	return provider.ReasonUnknown
}

func (p *Provider) fail(out *message.Message, emit func(provider.Event), err *provider.Error) (message.Message, error) {
	out.StopReason = message.StopError
	out.ErrorMessage = err.Message
	if out.Usage == nil {
		out.Usage = &message.Usage{}
	}
	m := *out
	emit(provider.Event{Type: provider.EventError, Reason: message.StopError, Message: &m})
	return *out, err
}

func (p *Provider) abort(out *message.Message, emit func(provider.Event), cause error) (message.Message, error) {
	out.StopReason = message.StopAborted
	out.ErrorMessage = "Request was aborted"
	m := *out
	emit(provider.Event{Type: provider.EventError, Reason: message.StopAborted, Message: &m})
	return *out, &provider.Error{Reason: provider.ReasonAborted, Message: "Request was aborted", Err: cause}
}

// split cuts s into n parts on rune boundaries (fewer when s is short).
func split(s string, n int) []string {
	runes := utf8.RuneCountInString(s)
	if n > runes {
		n = max(runes, 1)
	}
	parts := make([]string, 0, n)
	per := runes / n
	for i := 0; i < n-1; i++ {
		cut := 0
		for range per {
			_, size := utf8.DecodeRuneInString(s[cut:])
			cut += size
		}
		parts = append(parts, s[:cut])
		s = s[cut:]
	}
	return append(parts, s)
}

// words cuts s after each run of spaces, keeping every byte.
func words(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			return append(out, s)
		}
		j := i
		for j < len(s) && s[j] == ' ' {
			j++
		}
		out = append(out, s[:j])
		s = s[j:]
	}
	return out
}

// estimateUsage counts about four characters per token, so the demo and the
// context guard see plausible numbers.
func estimateUsage(req *provider.Request, out *message.Message) message.Usage {
	in := len(req.SystemPrompt)
	for _, m := range req.Messages {
		in += len(m.Content.Text())
	}
	u := message.Usage{Input: int64(in/4 + 1), Output: int64(len(out.Content.Text())/4 + 1)}
	u.TotalTokens = u.Input + u.Output
	return u
}
