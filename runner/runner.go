// Package runner runs one agent turn: it builds the model context from the
// session's history and the inbound message, calls the provider, executes the
// tool loop, streams events to a sink and returns the entries to append and
// the run's result. It declares the interfaces it needs and imports no NATS:
// cmd/worker plugs it into the lanes.
package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// Sink receives a run's events. lanes.Turn implements it.
type Sink interface {
	Emit(stream string, data events.EventData)
}

// Resolver finds the model and provider for a "provider/model-id" reference.
type Resolver interface {
	Resolve(ref string) (provider.Model, provider.Provider, error)
}

// Input is one turn.
type Input struct {
	SessionKey string
	SessionID  string
	RunID      string
	Attempt    int
	Inbound    *events.Inbound
	History    []message.Entry
	// Steer, when set, returns the steer-mode messages that arrived since
	// the last call; the runner polls it at every model-call boundary.
	Steer func(ctx context.Context) []*events.Inbound
}

// Output is a finished turn: the entries to append and the result.
type Output struct {
	Entries []message.Entry
	Result  *events.Result
}

// Config configures a Runner.
type Config struct {
	DefaultModel  string // "provider/model-id"; default "scripted/echo"
	SystemPrompt  string
	Resolver      Resolver
	MaxIterations int // model calls per turn; default 32
	Logger        zerolog.Logger
	Now           func() time.Time
}

// Runner runs turns. It is safe for concurrent use.
type Runner struct{ cfg Config }

// New returns a Runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Resolver == nil {
		return nil, errors.New("runner: a Resolver is required")
	}
	if cfg.DefaultModel == "" {
		cfg.DefaultModel = "scripted/echo"
	}
	if cfg.MaxIterations <= 0 {
		cfg.MaxIterations = 32
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Runner{cfg: cfg}, nil
}

// Run runs one turn. Provider failures end the run with an error result (the
// turn is complete: its messages are stored and the client is told); Run
// returns an error only when the turn could not be run at all and should be
// retried, e.g. because ctx was cancelled.
func (r *Runner) Run(ctx context.Context, in Input, sink Sink) (*Output, error) {
	// The lane publishes the lifecycle start event before calling the runner.
	start := r.cfg.Now()

	b := &builder{now: r.cfg.Now, parent: lastID(in.History)}
	history := contextMessages(in.History)
	user := userMessage(in.Inbound, start)
	b.add(user)

	ref := in.Inbound.Model
	if ref == "" {
		ref = r.cfg.DefaultModel
	}
	model, prov, err := r.cfg.Resolver.Resolve(ref)
	if err != nil {
		msg := fmt.Sprintf("model %q: %v", ref, err)
		return r.finish(ctx, b, sink, start, in, model, nil, &events.RunError{Kind: "model_not_found", Message: msg}, msg)
	}
	msgs := append(history, user)
	var acc usageAcc
	var last *message.Message
	for iter := 0; ; iter++ {
		if iter >= r.cfg.MaxIterations {
			msg := fmt.Sprintf("stopped after %d model calls in one turn", iter)
			return r.finish(ctx, b, sink, start, in, model, last, &events.RunError{Kind: "retry_limit", Message: msg}, msg)
		}
		req := &provider.Request{Model: model, SystemPrompt: r.cfg.SystemPrompt, Messages: msgs,
			Thinking: provider.ThinkingLevel(in.Inbound.Thinking), SessionID: in.SessionID}
		am, err := prov.Stream(ctx, req, streamTo(sink))
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		am.Timestamp = max(am.Timestamp, 1)
		last = &am
		acc.add(am.Usage)
		b.add(am)
		msgs = append(msgs, am)
		if err != nil {
			reason := provider.ReasonOf(err)
			text := failover.UserText(errorText(err, &am), model.Provider, model.ID)
			return r.finish(ctx, b, sink, start, in, model, last, &events.RunError{Kind: "provider_error", Message: string(reason) + ": " + errorText(err, &am)}, text, withUsage(&acc))
		}
		calls := am.ToolCalls()
		if am.StopReason == message.StopToolUse {
			// No tools are registered yet: answer each call with an error
			// result, as the reference does for an unknown tool.
			for _, c := range calls {
				res := message.Message{Role: message.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
					Content: message.BlocksOf(message.Text(fmt.Sprintf("Tool %s not found", c.Name))), IsError: true,
					Timestamp: r.cfg.Now().UnixMilli()}
				sink.Emit(events.StreamTool, events.EventData{Phase: "result", Name: c.Name, ToolCallID: c.ID, IsError: true})
				b.add(res)
				msgs = append(msgs, res)
			}
		}
		// Steering: messages sent in steer mode while the turn ran join it
		// here, at the boundary after the tool results (or after the reply),
		// and the model answers them in the same turn.
		steered := 0
		if in.Steer != nil {
			for _, s := range in.Steer(ctx) {
				um := userMessage(s, r.cfg.Now())
				b.add(um)
				msgs = append(msgs, um)
				steered++
			}
		}
		if steered == 0 && (am.StopReason != message.StopToolUse || len(calls) == 0) {
			break
		}
	}
	return r.finish(ctx, b, sink, start, in, model, last, nil, "", withUsage(&acc))
}

type finishOpt func(*events.Meta)

func withUsage(acc *usageAcc) finishOpt {
	return func(m *events.Meta) {
		if m.AgentMeta != nil {
			m.AgentMeta.Usage = acc.total()
			m.AgentMeta.LastCallUsage = acc.lastCall()
			m.AgentMeta.PromptTokens = acc.lastIn + acc.lastCacheRead + acc.lastCacheWrite
		}
	}
}

func (r *Runner) finish(_ context.Context, b *builder, sink Sink, start time.Time, in Input, model provider.Model,
	last *message.Message, runErr *events.RunError, errText string, opts ...finishOpt) (*Output, error) {
	end := r.cfg.Now()
	res := &events.Result{Meta: events.Meta{DurationMs: end.Sub(start).Milliseconds(), Error: runErr}}
	am := &events.AgentMeta{SessionID: in.SessionID, Provider: model.Provider, Model: model.ID}
	if last != nil {
		am.Provider, am.Model = last.Provider, last.Model
	}
	res.Meta.AgentMeta = am
	for _, o := range opts {
		o(&res.Meta)
	}
	if last != nil {
		res.Meta.StopReason = string(last.StopReason)
	}
	if runErr != nil {
		res.Payloads = append(res.Payloads, events.Payload{Text: errText, IsError: true})
		sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseError, Error: errText, EndedAt: end.UnixMilli()})
	} else {
		if last != nil {
			if text := strings.TrimSpace(last.Content.Text()); text != "" && text != "NO_REPLY" {
				res.Payloads = append(res.Payloads, events.Payload{Text: text})
			}
		}
		sink.Emit(events.StreamLifecycle, events.EventData{Phase: events.PhaseEnd, EndedAt: end.UnixMilli()})
	}
	return &Output{Entries: b.entries, Result: res}, nil
}

func errorText(err error, am *message.Message) string {
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Message != "" {
		return pe.Message
	}
	if am != nil && am.ErrorMessage != "" {
		return am.ErrorMessage
	}
	return err.Error()
}

// streamTo maps provider events onto run events.
func streamTo(sink Sink) func(provider.Event) {
	var text, thinking strings.Builder
	return func(ev provider.Event) {
		switch ev.Type {
		case provider.EventStart:
			text.Reset()
			thinking.Reset()
		case provider.EventTextDelta:
			text.WriteString(ev.Delta)
			sink.Emit(events.StreamAssistant, events.EventData{Delta: ev.Delta, Text: text.String()})
		case provider.EventThinkingDelta:
			thinking.WriteString(ev.Delta)
			sink.Emit(events.StreamThinking, events.EventData{Delta: ev.Delta, Text: thinking.String()})
		}
	}
}

// contextMessages returns the LLM-visible messages of the history.
func contextMessages(entries []message.Entry) []message.Message {
	out := make([]message.Message, 0, len(entries))
	for _, e := range entries {
		if e.Type != message.EntryMessage || e.Message == nil {
			continue
		}
		switch e.Message.Role {
		case message.RoleUser, message.RoleAssistant, message.RoleToolResult:
			out = append(out, *e.Message)
		}
	}
	return out
}

func userMessage(in *events.Inbound, now time.Time) message.Message {
	m := message.Message{Role: message.RoleUser, Timestamp: now.UnixMilli()}
	if len(in.Images) == 0 {
		m.Content = message.PlainText(in.Text)
		return m
	}
	var blocks []message.Block
	if in.Text != "" {
		blocks = append(blocks, message.Text(in.Text))
	}
	for _, img := range in.Images {
		blocks = append(blocks, message.Image(img.MimeType, img.Data))
	}
	m.Content = message.BlocksOf(blocks...)
	return m
}

func lastID(entries []message.Entry) string {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].ID != "" && !entries[i].IsHeader() {
			return entries[i].ID
		}
	}
	return ""
}

// builder makes pi session entries chained by parentId.
type builder struct {
	now     func() time.Time
	parent  string
	entries []message.Entry
}

func (b *builder) add(m message.Message) {
	id := sessionfile.NewEntryID()
	e := message.Entry{Type: message.EntryMessage, ID: id, Timestamp: b.now().UTC().Format("2006-01-02T15:04:05.000Z"), Message: &m}
	if b.parent != "" {
		p := b.parent
		e.ParentID = &p
	}
	b.parent = id
	b.entries = append(b.entries, e)
}

// usageAcc accumulates usage as the reference result reports it.
type usageAcc struct {
	input, output, cacheRead, cacheWrite  int64
	lastIn, lastCacheRead, lastCacheWrite int64
	last                                  message.Usage
	calls                                 int
}

func (a *usageAcc) add(u *message.Usage) {
	if u == nil || u.IsZero() {
		return
	}
	a.calls++
	a.input += u.Input
	a.output += u.Output
	a.cacheRead += u.CacheRead
	a.cacheWrite += u.CacheWrite
	a.lastIn, a.lastCacheRead, a.lastCacheWrite = u.Input, u.CacheRead, u.CacheWrite
	a.last = *u
}

// total reports input/cacheRead/cacheWrite of the last call, output summed,
// and total as the last call's total (reference §3.3).
func (a *usageAcc) total() *events.UsageMeta {
	if a.calls == 0 {
		return nil
	}
	t := a.last.Total()
	if a.last.TotalTokens == 0 {
		t = a.lastIn + a.lastCacheRead + a.lastCacheWrite + a.output
	}
	return &events.UsageMeta{Input: a.lastIn, Output: a.output, CacheRead: a.lastCacheRead, CacheWrite: a.lastCacheWrite, Total: t}
}

func (a *usageAcc) lastCall() *events.UsageMeta {
	if a.calls == 0 {
		return nil
	}
	u := a.last
	return &events.UsageMeta{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Total: u.Total()}
}
