package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/inflight"
	"github.com/lanefleet/lanefleet/internal/microsvc"
	"github.com/lanefleet/lanefleet/internal/reply"
)

// Hook is one hook a process serves: its name (what workers list in
// --hooks) and the kinds it handles; a nil handler is a kind it does not
// serve. Each handler runs on its own goroutine with a context that ends
// when the worker stops waiting or the Service stops.
type Hook struct {
	Name string
	// BeforeAgentStart returns the hook's contribution to a run's prompt.
	// An error contributes nothing (the worker warns).
	BeforeAgentStart func(ctx context.Context, ev StartEvent) (StartResult, error)
	// BeforeToolCall decides on one tool call. An error is a failure the
	// worker handles by its policy (blocks the call, or lets it run).
	BeforeToolCall func(ctx context.Context, ev ToolCallEvent) (ToolCallResult, error)
	// AgentEnd observes a finished run; nobody waits for it.
	AgentEnd func(ctx context.Context, ev EndEvent)
}

// ServeConfig configures Serve.
type ServeConfig struct {
	// Version is the service's SemVer version; "0.1.0" when empty.
	Version string
	// MaxConcurrent caps the handlers running at once; 64 when 0.
	MaxConcurrent int
	// AgentEndTimeout bounds an AgentEnd handler; 1 minute when 0.
	AgentEndTimeout time.Duration
	// Logger receives panics and replies that could not be sent. Silent
	// when zero.
	Logger zerolog.Logger
}

// flushTimeout bounds Serve's flush.
const flushTimeout = 5 * time.Second

// Service is a set of hooks served over NATS: one micro service named
// ServiceName with one endpoint per hook and kind, on
// agent.hook.<name>.<kind>, in the micro default queue group (the
// processes serving one hook share its calls). One service answers a
// discovery request once, whatever the number of hooks, which is what the
// hook-server permission allows.
type Service struct {
	micro.Service
	svc   *microsvc.Service
	cfg   ServeConfig
	calls *inflight.Group
	guard *reply.Guard
}

// handlerFunc decodes one request and runs a hook's handler.
type handlerFunc func(context.Context, []byte) (any, error)

// Serve serves hs on nc. It returns an error when a name is not valid
// (ValidName) or repeated, a hook handles no kind, or micro cannot add the
// service or its endpoints.
func Serve(nc *nats.Conn, cfg ServeConfig, hs ...Hook) (*Service, error) {
	if len(hs) == 0 {
		return nil, errors.New("hooks: serve: no hooks")
	}
	seen := map[string]bool{}
	for _, h := range hs {
		switch {
		case !ValidName(h.Name):
			return nil, fmt.Errorf("hooks: serve: hook name %q must be 1-64 letters, digits, '_' or '-'", h.Name)
		case seen[h.Name]:
			return nil, fmt.Errorf("hooks: serve: hook %s given twice", h.Name)
		case h.BeforeAgentStart == nil && h.BeforeToolCall == nil && h.AgentEnd == nil:
			return nil, fmt.Errorf("hooks: serve: hook %s handles no kind", h.Name)
		}
		seen[h.Name] = true
	}
	if cfg.Version == "" {
		cfg.Version = "0.1.0"
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 64
	}
	if cfg.AgentEndTimeout <= 0 {
		cfg.AgentEndTimeout = time.Minute
	}
	svc := microsvc.New(nc, microsvc.Config{Name: ServiceName, Version: cfg.Version, Description: "lanefleet run hooks",
		Label: "hooks", Log: cfg.Logger, MaxConcurrent: cfg.MaxConcurrent, FlushTimeout: flushTimeout})
	s := &Service{svc: svc, cfg: cfg, calls: svc.Calls, guard: svc.Guard}
	var eps []microsvc.Endpoint
	for _, h := range hs {
		for _, k := range Kinds() {
			f := handlerOf(h, k)
			if f == nil {
				continue
			}
			eps = append(eps, microsvc.Endpoint{Name: h.Name + "-" + string(k), Subject: Subject(h.Name, k), Handler: s.handler(h.Name, k, f),
				Metadata: map[string]string{MetaHook: h.Name, MetaKind: string(k)}, What: h.Name + " " + string(k)})
		}
	}
	if err := svc.Serve(eps...); err != nil {
		return nil, fmt.Errorf("hooks: serve: %w", err)
	}
	s.Service = svc.Service
	return s, nil
}

// handlerOf returns h's handler of kind k, nil when h does not serve it.
func handlerOf(h Hook, k Kind) handlerFunc {
	switch {
	case k == BeforeAgentStart && h.BeforeAgentStart != nil:
		return func(ctx context.Context, data []byte) (any, error) {
			var ev StartEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				return nil, badRequest{err}
			}
			return h.BeforeAgentStart(ctx, ev)
		}
	case k == BeforeToolCall && h.BeforeToolCall != nil:
		return func(ctx context.Context, data []byte) (any, error) {
			var ev ToolCallEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				return nil, badRequest{err}
			}
			return h.BeforeToolCall(ctx, ev)
		}
	case k == AgentEnd && h.AgentEnd != nil:
		return func(ctx context.Context, data []byte) (any, error) {
			var ev EndEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				return nil, badRequest{err}
			}
			h.AgentEnd(ctx, ev)
			return nil, nil
		}
	}
	return nil
}

// badRequest marks a request that does not decode.
type badRequest struct{ err error }

func (b badRequest) Error() string { return "malformed request: " + b.err.Error() }

// Stop stops taking calls, cancels the handlers running (cause
// ErrStopped), waits for them to return and stops the micro service.
func (s *Service) Stop() error {
	if err := s.svc.Stop(ErrStopped); err != nil {
		return fmt.Errorf("hooks: stop: %w", err)
	}
	return nil
}

// handler takes a request off micro's subscription goroutine and runs it
// on its own, so a slow handler does not hold up the next request (at most
// MaxConcurrent at once: the next wait in the subscription).
func (s *Service) handler(name string, kind Kind, f handlerFunc) micro.Handler {
	return s.guard.Handler(name+"-"+string(kind), func(req *reply.Request) {
		to, data, hdr := req.To, req.Data, req.Headers
		if to.None() && kind != AgentEnd {
			s.cfg.Logger.Debug().Str("kind", string(kind)).Msg("hooks: ignored a request without a reply subject")
			return
		}
		// serve turns a handler's panic into the call's error: no panic hook.
		if err := s.calls.Go(func(ctx context.Context) { s.serve(ctx, name, kind, f, to, data, hdr) }, nil); err != nil {
			s.respondError(name, to, CodeUnavailable, "hook "+name+" is stopping")
		}
	})
}

// errCallerTimeout is the cause of a handler's context when the worker's
// timeout passes.
var errCallerTimeout = errors.New("the worker stopped waiting")

// serve runs one handler and replies.
func (s *Service) serve(ctx context.Context, name string, kind Kind, f handlerFunc, to reply.To, data []byte, hdr nats.Header) {
	timeout := s.cfg.AgentEndTimeout
	if v := hdr.Get(HeaderTimeout); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			s.respondError(name, to, CodeBadRequest, fmt.Sprintf("hook %s got a malformed %s header %q", name, HeaderTimeout, v))
			return
		}
		timeout = min(time.Duration(ms)*time.Millisecond, MaxTimeout)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errCallerTimeout)
	defer cancel()
	res, err := call(ctx, f, data)
	if err == nil && ctx.Err() != nil {
		// The worker stopped waiting: whatever the handler decided
		// came too late (and a handler that merely gave up must not
		// read as "allow").
		err = context.Cause(ctx)
	}
	if pe := (*panicError)(nil); errors.As(err, &pe) {
		s.cfg.Logger.Error().Str("hook", name).Str("kind", string(kind)).Interface("panic", pe.value).Bytes("stack", pe.stack).Msg("hooks: handler panicked")
	}
	if to.None() {
		if err != nil {
			s.cfg.Logger.Warn().Err(err).Str("hook", name).Str("kind", string(kind)).Msg("hooks: handler failed")
		}
		return
	}
	if err != nil {
		var br badRequest
		switch cause := context.Cause(ctx); {
		case errors.As(err, &br):
			s.respondError(name, to, CodeBadRequest, fmt.Sprintf("hook %s (%s) got a %v", name, kind, err))
		case ctx.Err() != nil && errors.Is(cause, errCallerTimeout):
			s.respondError(name, to, CodeTimeout, fmt.Sprintf("hook %s (%s) timed out after %s", name, kind, timeout))
		case ctx.Err() != nil && errors.Is(cause, ErrStopped):
			s.respondError(name, to, CodeFailed, fmt.Sprintf("hook %s (%s) was stopped before it finished", name, kind))
		default:
			s.respondError(name, to, CodeFailed, err.Error())
		}
		return
	}
	out, err := json.Marshal(res)
	if err == nil && len(out) > MaxReplyBytes {
		err = fmt.Errorf("%d bytes; the limit is %d", len(out), MaxReplyBytes)
	}
	if err != nil {
		s.respondError(name, to, CodeFailed, fmt.Sprintf("hook %s (%s) produced a reply that cannot be sent: %v", name, kind, err))
		return
	}
	if err := s.guard.Send(to, &nats.Msg{Data: out}); err != nil {
		s.cfg.Logger.Warn().Err(err).Str("hook", name).Msg("hooks: reply not sent")
	}
}

// call runs f, turning a panic into an error.
func call(ctx context.Context, f handlerFunc, data []byte) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return f(ctx, data)
}

// panicError is a handler's panic; the stack stays in the serving
// process's log.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// respondError sends a micro error reply; without a reply subject it only
// logs.
func (s *Service) respondError(name string, to reply.To, code, text string) {
	if to.None() {
		s.cfg.Logger.Warn().Str("hook", name).Str("code", code).Msg(text)
		return
	}
	body, _ := json.Marshal(errorBody{Error: text})
	msg := &nats.Msg{Data: body, Header: nats.Header{
		micro.ErrorHeader: []string{headerLine(text)}, micro.ErrorCodeHeader: []string{code}}}
	if err := s.guard.Send(to, msg); err != nil {
		s.cfg.Logger.Warn().Err(err).Str("hook", name).Msg("hooks: error reply not sent")
	}
}
