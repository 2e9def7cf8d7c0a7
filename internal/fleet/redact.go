package fleet

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/redact"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/tools"
)

// secrets lists what the member masks in what its runs produce and in its
// logs (see the masking below): provider keys in the environment or given
// for the --openai-compatible server, every auth profile's key (and each
// half of an AWS access key pair) and tokens (a keyRef's or tokenRef's
// value, and a refreshRef's, as they read at start from src, an exec
// provider's included),
// the NATS password (given or in the URL) or token, the NKey seed and
// credentials files, and the skills' API keys.
func secrets(cfg Config, creds *authprofile.Store, src authprofile.SecretSources) []string {
	out := []string{cfg.Password, cfg.OpenAICompatibleKey, cfg.Env(BraveKeyEnv)}
	for _, p := range catalog.Providers() {
		for _, name := range p.KeyEnv {
			out = append(out, cfg.Env(name))
		}
	}
	if creds != nil {
		for _, p := range creds.Profiles {
			out = append(out, p.Token.Reveal(), p.Access.Reveal(), p.Refresh.Reveal())
			out = append(out, secretForms(p.Key.Reveal())...)
			if p.KeyRef != "" || p.TokenRef != "" {
				// A secret held by reference, as it reads at start.
				if k, err := p.Secret(src); err == nil {
					out = append(out, secretForms(k.Reveal())...)
				}
			}
			if p.RefreshRef != "" {
				if r, err := p.RefreshSecret(src); err == nil {
					out = append(out, r.Reveal())
				}
			}
		}
	}
	for _, u := range strings.Split(cfg.NATSURL, ",") {
		if pu, err := url.Parse(strings.TrimSpace(u)); err == nil && pu.User != nil {
			pw, _ := pu.User.Password()
			out = append(out, pw)
			if pw == "" {
				out = append(out, pu.User.Username()) // a token
			}
		}
	}
	for _, f := range []string{cfg.NKeyFile, cfg.CredsFile} {
		if f == "" {
			continue
		}
		if b, err := os.ReadFile(f); err == nil {
			// Seeds and JWTs are single lines; the file's delimiters are not secret.
			for _, line := range strings.Split(string(b), "\n") {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "-----") && !strings.Contains(line, " ") {
					out = append(out, line)
				}
			}
		}
	}
	for _, sc := range cfg.Skills {
		out = append(out, sc.APIKey)
	}
	return out
}

// secretForms is the secret v and, for an AWS access key pair (a Bedrock
// profile's "AKID:SECRET"), each half: a secret of its own.
func secretForms(v string) []string {
	if parts := strings.Split(v, ":"); len(parts) > 1 {
		return append([]string{v}, parts...)
	}
	return []string{v}
}

// Masking follows package redact's rule: what the worker produces is
// masked where it is produced, before the runner, the model, an event, the
// transcript or the step journal sees it; what the sender supplied passes
// as it is. The worker's sources are the providers (model output, streamed
// deltas included, and their errors: maskingProvider), the tools (worker
// and remote tools' results, partial results and errors: maskingTool) and
// the hooks (prepended context, system prompt, block reasons); everything
// else a run publishes is the sender's own text, the runner's fixed texts
// or built from those. Each turn has a Masker (handle puts it in the
// turn's context) that does not mask the secrets the turn's sender
// supplied (senderContent); outside a turn every secret is masked.

// maskerKey is the context key of a turn's Masker.
type maskerKey struct{}

// withMasker returns ctx carrying a turn's Masker.
func withMasker(ctx context.Context, m *redact.Masker) context.Context {
	return context.WithValue(ctx, maskerKey{}, m)
}

// maskerOf returns the Masker of ctx's turn; without one, a Masker of every
// secret of red.
func maskerOf(ctx context.Context, red *redact.Redactor) *redact.Masker {
	if m, ok := ctx.Value(maskerKey{}).(*redact.Masker); ok {
		return m
	}
	return red.Masker(nil)
}

// turnMasker returns the Masker of a turn whose sender supplied inbound and
// the session's history, and the turn's steer function, which adds the
// steered messages to what the sender supplied.
func turnMasker(red *redact.Redactor, t *lanes.Turn, inbound *events.Inbound) (*redact.Masker, func(context.Context) []*events.Inbound) {
	sc := &senderContent{history: t.History, inbound: []*events.Inbound{inbound}}
	mk := red.Masker(sc.supplied)
	steer := func(ctx context.Context) []*events.Inbound {
		ins := t.Steer(ctx)
		if len(ins) > 0 {
			sc.add(ins)
			mk.Refresh()
		}
		return ins
	}
	return mk, steer
}

// senderContent is what a turn's sender supplied: the session's history
// (its messages and imported lines, whoever wrote them: what the worker
// wrote there was masked, so a secret found in it is one the sender gave),
// the turn's message and the messages steered into it. It is read only
// when a run's text holds a secret.
type senderContent struct {
	mu      sync.Mutex
	history []message.Entry
	inbound []*events.Inbound
}

func (s *senderContent) add(ins []*events.Inbound) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inbound = append(s.inbound, ins...)
}

// supplied reports whether text occurs in what the sender supplied.
func (s *senderContent) supplied(text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := func(v string) bool { return strings.Contains(v, text) }
	for _, m := range s.inbound {
		if in(m.Text) || in(m.Model) || in(m.Thinking) || in(m.AuthProfile) || in(m.ID) || in(m.Session) {
			return true
		}
		for _, tr := range m.ToolResults {
			if in(tr.Text) {
				return true
			}
		}
		for _, ct := range m.Tools {
			if in(ct.Name) || in(ct.Description) || anyHolds(ct.Parameters, text) {
				return true
			}
		}
	}
	for _, e := range s.history {
		if bytes.Contains(e.Raw, []byte(text)) || anyHolds(e.Fields, text) {
			return true
		}
		if m := e.Message; m != nil {
			if in(m.ErrorMessage) || anyHolds(m.Details, text) || anyHolds(m.Extra, text) {
				return true
			}
			for _, b := range m.Content.Blocks {
				if in(b.Text) || in(b.Thinking) || anyHolds(b.Arguments, text) {
					return true
				}
			}
		}
	}
	return false
}

// anyHolds reports whether text occurs in a string of v (decoded JSON or
// msgpack: maps, slices, strings).
func anyHolds(v any, text string) bool {
	switch x := v.(type) {
	case string:
		return strings.Contains(x, text)
	case map[string]any:
		for k, e := range x {
			if strings.Contains(k, text) || anyHolds(e, text) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if anyHolds(e, text) {
				return true
			}
		}
	case []string:
		for _, e := range x {
			if strings.Contains(e, text) {
				return true
			}
		}
	}
	return false
}

// maskingResolver hands out providers whose output is masked.
type maskingResolver struct {
	runner.Resolver
	red *redact.Redactor
}

func (r maskingResolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	m, p, err := r.Resolver.Resolve(ref)
	if p != nil {
		p = &maskingProvider{p: p, red: r.red} // a pointer: the value's method wrapper would copy the reply once more on the turn's stack
	}
	return m, p, err
}

// maskingProvider masks a model's output: its streamed deltas (each
// block's through a redact.Stream, so a secret split across deltas never
// shows, nor its start), each finished block, the finished message and the
// error.
type maskingProvider struct {
	p   provider.Provider
	red *redact.Redactor
}

func (p *maskingProvider) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (am message.Message, err error) {
	ms := &modelStream{mk: maskerOf(ctx, p.red), emit: emit}
	am, err = p.p.Stream(ctx, req, ms.event)
	err = ms.end(&am, err)
	return am, err
}

// end flushes what the stream held back, then masks the reply in place and
// the error. Not inlined in Stream: that frame stays on the turn's stack
// while the model answers (see docs/scaling.md, "What a turn in flight
// holds").
//
//go:noinline
func (ms *modelStream) end(am *message.Message, err error) error {
	ms.flushAll()
	*am = maskMessage(ms.mk, *am)
	return maskError(ms.mk, err)
}

// modelStream masks one model call's events on their way to emit.
type modelStream struct {
	mk   *redact.Masker
	emit func(provider.Event)
	open map[int]*openBlock // by content index
}

// openBlock is a block whose deltas are streaming.
type openBlock struct {
	s     *redact.Stream
	delta provider.EventType
}

func (ms *modelStream) event(ev provider.Event) {
	switch ev.Type {
	case provider.EventTextDelta, provider.EventThinkingDelta, provider.EventToolCallDelta:
		b := ms.open[ev.ContentIndex]
		if b == nil {
			if ms.open == nil {
				ms.open = map[int]*openBlock{}
			}
			b = &openBlock{s: ms.mk.Stream(), delta: ev.Type}
			ms.open[ev.ContentIndex] = b
		}
		if ev.Delta = b.s.Write(ev.Delta); ev.Delta == "" {
			return // held back
		}
	case provider.EventTextEnd, provider.EventThinkingEnd:
		ms.flush(ev.ContentIndex)
		ev.Content = ms.mk.String(ev.Content)
	case provider.EventToolCallEnd:
		ms.flush(ev.ContentIndex)
		if ev.ToolCall != nil {
			b := maskBlock(ms.mk, *ev.ToolCall)
			ev.ToolCall = &b
		}
	case provider.EventDone, provider.EventError:
		ms.flushAll()
		if ev.Message != nil {
			m := maskMessage(ms.mk, *ev.Message)
			ev.Message = &m
		}
	}
	ms.emit(ev)
}

// flush ends a block's deltas: what its Stream held back goes out as its
// last delta.
func (ms *modelStream) flush(idx int) {
	b := ms.open[idx]
	if b == nil {
		return
	}
	delete(ms.open, idx)
	if rest := b.s.Flush(); rest != "" {
		ms.emit(provider.Event{Type: b.delta, ContentIndex: idx, Delta: rest})
	}
}

// flushAll ends every open block, in content order.
func (ms *modelStream) flushAll() {
	for _, idx := range slices.Sorted(maps.Keys(ms.open)) {
		ms.flush(idx)
	}
}

// maskMessage returns m with its blocks and error message masked; m's
// blocks are not changed in place.
func maskMessage(mk *redact.Masker, m message.Message) message.Message {
	m.ErrorMessage = mk.String(m.ErrorMessage)
	if len(m.Content.Blocks) > 0 {
		blocks := make([]message.Block, len(m.Content.Blocks))
		for i, b := range m.Content.Blocks {
			blocks[i] = maskBlock(mk, b)
		}
		m.Content.Blocks = blocks
	}
	return m
}

// maskBlock returns b with its text, thinking and tool-call arguments
// masked.
func maskBlock(mk *redact.Masker, b message.Block) message.Block {
	b.Text = mk.String(b.Text)
	b.Thinking = mk.String(b.Thinking)
	if b.Arguments != nil {
		b.Arguments = mk.Value(b.Arguments).(map[string]any)
	}
	return b
}

// maskError returns err with its message masked: a *provider.Error keeps
// its type (the run loop reads its reason and message), anything else
// keeps its chain for errors.Is and errors.As.
func maskError(mk *redact.Masker, err error) error {
	if err == nil {
		return nil
	}
	text := mk.String(err.Error())
	var pe *provider.Error
	if errors.As(err, &pe) {
		msg := mk.String(pe.Message)
		if msg == pe.Message && text == err.Error() {
			return err
		}
		c := *pe
		c.Message = msg
		if err == error(pe) {
			return &c
		}
		return &maskedError{text: text, err: &c}
	}
	if text == err.Error() {
		return err
	}
	return &maskedError{text: text, err: err}
}

// maskedError is an error whose message was masked.
type maskedError struct {
	text string
	err  error
}

func (e *maskedError) Error() string { return e.text }
func (e *maskedError) Unwrap() error { return e.err }

// maskTools returns the tools with their results masked.
func maskTools(l tools.List, red *redact.Redactor) tools.List {
	out := make(tools.List, len(l))
	for i, t := range l {
		out[i] = maskingTool{Tool: t, red: red}
	}
	return out
}

// maskingTool masks a tool's results, partial results and errors.
type maskingTool struct {
	tools.Tool
	red *redact.Redactor
}

// Idempotent is the tool's own.
func (t maskingTool) Idempotent() bool { return tools.IsIdempotent(t.Tool) }

// EndsTurn is the tool's own.
func (t maskingTool) EndsTurn() bool { return tools.EndsTurn(t.Tool) }

func (t maskingTool) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	mk := maskerOf(ctx, t.red)
	if up := c.Update; up != nil {
		c.Update = func(p tools.Result) { up(maskResult(mk, p, true)) }
	}
	res, err := t.Tool.Call(ctx, c)
	if err != nil {
		return res, maskError(mk, err)
	}
	return maskResult(mk, res, false), nil
}

// maskResult returns a tool result masked: a partial one without an end
// that may be a secret's start.
func maskResult(mk *redact.Masker, r tools.Result, partial bool) tools.Result {
	content := make([]message.Block, len(r.Content))
	for i, b := range r.Content {
		if partial {
			b.Text = mk.Partial(b.Text)
		} else {
			b.Text = mk.String(b.Text)
		}
		content[i] = b
	}
	r.Content = content
	if r.Details != nil {
		r.Details = mk.Value(r.Details).(map[string]any)
	}
	return r
}

// maskStartHooks returns the before_agent_start hooks with their replies
// masked.
func maskStartHooks(hs []agentprompt.Hook, red *redact.Redactor) []agentprompt.Hook {
	out := make([]agentprompt.Hook, len(hs))
	for i, h := range hs {
		out[i] = agentprompt.HookFunc(func(ctx context.Context, in agentprompt.HookInput) (agentprompt.HookResult, error) {
			res, err := h.BeforeStart(ctx, in)
			mk := maskerOf(ctx, red)
			res.PrependContext, res.SystemPrompt = mk.String(res.PrependContext), mk.String(res.SystemPrompt)
			return res, err
		})
	}
	return out
}

// maskingToolHook masks a before_tool_call hook's reason for blocking a
// call (the model and the tool's result event show it).
type maskingToolHook struct {
	runner.ToolHook
	red *redact.Redactor
}

func (h maskingToolHook) BeforeToolCall(ctx context.Context, in runner.ToolHookInput) (runner.ToolHookResult, error) {
	res, err := h.ToolHook.BeforeToolCall(ctx, in)
	res.Reason = maskerOf(ctx, h.red).String(res.Reason)
	return res, err
}
