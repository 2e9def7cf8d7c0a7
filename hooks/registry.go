package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/events"
)

// FailMode is what a worker does with a tool call when a before_tool_call
// hook cannot decide on it (unreachable, timed out, failed, malformed
// reply).
type FailMode string

// The fail modes.
const (
	// FailClosed blocks the call: the model is told the hook could not
	// check it. The default: an operator lists a before_tool_call hook to
	// guard tools, and a guard that is down must not let every call
	// through.
	FailClosed FailMode = "closed"
	// FailOpen lets the call run as made, with a warning (the reference's
	// behaviour for a failing hook).
	FailOpen FailMode = "open"
)

// ParseFailMode returns the mode named s ("" is FailClosed).
func ParseFailMode(s string) (FailMode, error) {
	switch FailMode(s) {
	case "", FailClosed:
		return FailClosed, nil
	case FailOpen:
		return FailOpen, nil
	}
	return "", fmt.Errorf("hooks: tool-call failure mode %q: want closed or open", s)
}

// Defaults.
const (
	// TimeoutDefault bounds one hook call.
	TimeoutDefault = 10 * time.Second
	// WindowDefault is how long discovery collects $SRV.INFO replies.
	WindowDefault = 250 * time.Millisecond
	// RefreshIntervalDefault is how often Registry.Run refreshes.
	RefreshIntervalDefault = 30 * time.Second
)

// Config configures a Registry.
type Config struct {
	// Names are the hooks runs use, in the order they are called. Nothing
	// discovered is used unless listed.
	Names []string
	// Timeout bounds each hook call; TimeoutDefault when 0, at most
	// MaxTimeout.
	Timeout time.Duration
	// ToolFailure is what a before_tool_call failure does; FailClosed when
	// empty.
	ToolFailure FailMode
	// Window is how long discovery waits for replies; WindowDefault when 0.
	Window time.Duration
	// RefreshInterval is how often Run refreshes; RefreshIntervalDefault
	// when 0.
	RefreshInterval time.Duration
	// Logger receives hook failures and discovery news. Silent when zero.
	Logger zerolog.Logger
}

// Registry calls the hooks a worker lists. It learns by discovery which
// kinds each listed hook serves, and never forgets a kind while it runs:
// a before_tool_call hook that goes away is a failure (see FailMode), not
// a hook that no longer applies. A listed hook not yet discovered is not
// called (a warning says so once).
//
// It is safe for concurrent use: runs call it while Run refreshes it.
type Registry struct {
	nc  *nats.Conn
	cfg Config

	mu     sync.Mutex
	known  map[string]map[Kind]bool // by hook name
	warned map[string]bool          // listed hooks said to be missing
}

// NewRegistry returns a Registry for cfg; call Refresh or Run to discover
// the hooks. It returns an error when a name is invalid or repeated, or a
// setting is out of range.
func NewRegistry(nc *nats.Conn, cfg Config) (*Registry, error) {
	seen := map[string]bool{}
	for _, n := range cfg.Names {
		if !ValidName(n) {
			return nil, fmt.Errorf("hooks: hook name %q must be 1-64 letters, digits, '_' or '-'", n)
		}
		if seen[n] {
			return nil, fmt.Errorf("hooks: hook %s listed twice", n)
		}
		seen[n] = true
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = TimeoutDefault
	}
	if cfg.Timeout > MaxTimeout {
		return nil, fmt.Errorf("hooks: timeout %s is over the limit of %s", cfg.Timeout, MaxTimeout)
	}
	mode, err := ParseFailMode(string(cfg.ToolFailure))
	if err != nil {
		return nil, err
	}
	cfg.ToolFailure = mode
	if cfg.Window <= 0 {
		cfg.Window = WindowDefault
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = RefreshIntervalDefault
	}
	return &Registry{nc: nc, cfg: cfg, known: map[string]map[Kind]bool{}, warned: map[string]bool{}}, nil
}

// Serves reports whether the hook name has been discovered serving kind.
func (r *Registry) Serves(name string, kind Kind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.known[name][kind]
}

// Run refreshes the registry at once and then every RefreshInterval until
// ctx ends, and returns ctx's cause.
func (r *Registry) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.RefreshInterval)
	defer t.Stop()
	for {
		if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn().Err(err).Msg("hooks: refresh failed")
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// Refresh asks the hook services for their endpoints and adds the kinds
// the listed hooks serve. An endpoint of a hook not listed, of an unknown
// kind, or served on a subject other than its own is ignored.
func (r *Registry) Refresh(ctx context.Context) error {
	if len(r.cfg.Names) == 0 {
		return nil
	}
	infos, err := r.collect(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, info := range infos {
		for _, ep := range info.Endpoints {
			name, kind := ep.Metadata[MetaHook], Kind(ep.Metadata[MetaKind])
			switch {
			case !slices.Contains(r.cfg.Names, name):
				continue
			case !slices.Contains(Kinds(), kind):
				r.cfg.Logger.Debug().Str("hook", name).Str("endpoint", ep.Name).Msg("hooks: not a hook kind; ignored")
				continue
			case ep.Subject != Subject(name, kind):
				r.cfg.Logger.Warn().Str("hook", name).Str("subject", ep.Subject).Msg("hooks: endpoint not on its own subject; ignored")
				continue
			}
			if r.known[name] == nil {
				r.known[name] = map[Kind]bool{}
			}
			if !r.known[name][kind] {
				r.cfg.Logger.Info().Str("hook", name).Str("kind", string(kind)).Msg("hooks: found")
			}
			r.known[name][kind] = true
		}
	}
	for _, n := range r.cfg.Names {
		if r.known[n] == nil && !r.warned[n] {
			r.warned[n] = true
			r.cfg.Logger.Warn().Str("hook", n).Msg("hooks: listed but no process serves it yet; it is not called until one does")
		}
	}
	return nil
}

// collect sends one $SRV.INFO request and gathers replies for the window.
func (r *Registry) collect(ctx context.Context) ([]micro.Info, error) {
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("hooks: discover: %w", err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the inbox is never reused
	subj, _ := micro.ControlSubject(micro.InfoVerb, ServiceName, "")
	if err := r.nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, fmt.Errorf("hooks: discover: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Window)
	defer cancel()
	var infos []micro.Info
	for {
		msg, err := sub.NextMsgWithContext(wctx)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return infos, nil
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("hooks: discover: %w", context.Cause(ctx))
		case err != nil && wctx.Err() != nil:
			return infos, nil
		case err != nil:
			return nil, fmt.Errorf("hooks: discover: %w", err)
		}
		if len(msg.Data) > MaxReplyBytes {
			continue
		}
		var info micro.Info
		if json.Unmarshal(msg.Data, &info) != nil || info.Type != micro.InfoResponseType {
			continue
		}
		infos = append(infos, info)
	}
}

// callers returns the listed hooks known to serve kind, in listed order.
func (r *Registry) callers(kind Kind) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.cfg.Names {
		if r.known[n][kind] {
			out = append(out, n)
		}
	}
	return out
}

// request sends one hook request and returns the reply body, or an error
// wrapping ErrUnavailable, ErrTimeout, ErrFailed or ErrBadReply.
func (r *Registry) request(ctx context.Context, name string, kind Kind, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, r.cfg.Timeout, ErrTimeout)
	defer cancel()
	msg := &nats.Msg{Subject: Subject(name, kind), Data: body, Header: nats.Header{}}
	if dl, ok := ctx.Deadline(); ok {
		msg.Header.Set(HeaderTimeout, strconv.FormatInt(max(1, time.Until(dl).Milliseconds()), 10))
	}
	rep, err := r.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("hook %s (%s): %w: no process serves it", name, kind, ErrUnavailable)
	case err != nil && ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrTimeout):
		return nil, fmt.Errorf("hook %s (%s): %w after %s", name, kind, ErrTimeout, r.cfg.Timeout)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("hook %s (%s): %w", name, kind, context.Cause(ctx))
	case err != nil:
		return nil, fmt.Errorf("hook %s (%s): %w: %w", name, kind, ErrUnavailable, err)
	}
	if code := rep.Header.Get(micro.ErrorCodeHeader); code != "" {
		text := rep.Header.Get(micro.ErrorHeader)
		var eb errorBody
		if len(rep.Data) <= MaxReplyBytes && json.Unmarshal(rep.Data, &eb) == nil && eb.Error != "" {
			text = eb.Error
		}
		sentinel := ErrFailed
		switch code {
		case CodeUnavailable:
			sentinel = ErrUnavailable
		case CodeTimeout:
			sentinel = ErrTimeout
		}
		return nil, fmt.Errorf("hook %s (%s): %w: %s", name, kind, sentinel, cut(text, MaxReasonBytes))
	}
	return rep.Data, nil
}

// StartHooks returns one agentprompt.Hook per listed hook, in listed
// order, for runner.Config.Hooks: each calls its hook's
// before_agent_start endpoint once discovered, and contributes nothing
// before.
func (r *Registry) StartHooks() []agentprompt.Hook {
	out := make([]agentprompt.Hook, 0, len(r.cfg.Names))
	for _, n := range r.cfg.Names {
		out = append(out, startHook{r: r, name: n})
	}
	return out
}

// startHook is one listed hook's before_agent_start.
type startHook struct {
	r    *Registry
	name string
}

// BeforeStart implements agentprompt.Hook.
func (h startHook) BeforeStart(ctx context.Context, in agentprompt.HookInput) (agentprompt.HookResult, error) {
	if !h.r.Serves(h.name, BeforeAgentStart) {
		return agentprompt.HookResult{}, nil
	}
	body, err := json.Marshal(StartEvent{Hook: h.name, SessionKey: in.SessionKey, RunID: in.RunID, Prompt: in.Prompt, SystemPrompt: in.SystemPrompt})
	if err != nil {
		return agentprompt.HookResult{}, fmt.Errorf("hook %s: %w", h.name, err)
	}
	data, err := h.r.request(ctx, h.name, BeforeAgentStart, body)
	if err != nil {
		return agentprompt.HookResult{}, err
	}
	res, err := decodeStartResult(data)
	if err != nil {
		return agentprompt.HookResult{}, fmt.Errorf("hook %s (%s): %w", h.name, BeforeAgentStart, err)
	}
	return agentprompt.HookResult{PrependContext: res.PrependContext, SystemPrompt: res.SystemPrompt}, nil
}

// ToolCall is a tool call a run is about to make, as BeforeToolCall sees
// it.
type ToolCall struct {
	SessionKey, RunID string
	ToolCallID        string
	ToolName          string
	// Args are the arguments the model gave; read-only.
	Args map[string]any
}

// ToolVerdict is the hooks' decision on a tool call. The zero value lets
// the call run as the model made it.
type ToolVerdict struct {
	// Block refuses the call, with Reason as the tool's error result.
	Block  bool
	Reason string
	// Args, when not nil, replace the call's arguments.
	Args map[string]any
}

// RunEnd is a finished run, as AgentEnd sends it.
type RunEnd struct {
	SessionKey, RunID string
	Attempt           int
	Result            *events.Result
}

// BeforeToolCall decides a tool call by the listed before_tool_call
// hooks decide in order, each seeing the arguments the one before it
// rewrote; the first block ends it. A hook that cannot decide blocks the
// call (FailClosed) or is skipped (FailOpen), with a warning either way;
// BeforeToolCall itself never fails.
func (r *Registry) BeforeToolCall(ctx context.Context, in ToolCall) (ToolVerdict, error) {
	var out ToolVerdict
	args := in.Args
	for _, name := range r.callers(BeforeToolCall) {
		res, err := r.toolCall(ctx, name, in, args)
		if err != nil {
			log := r.cfg.Logger.Warn().Err(err).Str("hook", name).Str("run_id", in.RunID).Str("tool", in.ToolName)
			if r.cfg.ToolFailure == FailOpen {
				log.Msg("hooks: before_tool_call failed; the call goes on unchecked by it (fail open)")
				continue
			}
			log.Msg("hooks: before_tool_call failed; the call is blocked (fail closed)")
			return ToolVerdict{Block: true, Reason: fmt.Sprintf("Tool call blocked: the hook %s that must check it could not (%v).", name, err)}, nil
		}
		if res.Block {
			reason := res.BlockReason
			if reason == "" {
				reason = fmt.Sprintf("Tool call blocked by hook %s.", name)
			}
			return ToolVerdict{Block: true, Reason: reason}, nil
		}
		if res.Params != nil {
			args, out.Args = res.Params, res.Params
		}
	}
	return out, nil
}

func (r *Registry) toolCall(ctx context.Context, name string, in ToolCall, args map[string]any) (ToolCallResult, error) {
	body, err := json.Marshal(ToolCallEvent{Hook: name, SessionKey: in.SessionKey, RunID: in.RunID, ToolCallID: in.ToolCallID, ToolName: in.ToolName, Params: args})
	if err != nil {
		return ToolCallResult{}, fmt.Errorf("hook %s: arguments cannot be encoded: %w", name, err)
	}
	data, err := r.request(ctx, name, BeforeToolCall, body)
	if err != nil {
		return ToolCallResult{}, err
	}
	res, err := decodeToolCallResult(data)
	if err != nil {
		return ToolCallResult{}, fmt.Errorf("hook %s (%s): %w", name, BeforeToolCall, err)
	}
	return res, nil
}

// endHeadroom is what an agent_end message keeps free of the max payload
// for headers.
const endHeadroom = 1024

// AgentEnd publishes the run's end to each
// listed agent_end hook and returns (nobody replies). A result too large
// for one message goes with its payload texts cut (Truncated).
func (r *Registry) AgentEnd(in RunEnd) {
	for _, name := range r.callers(AgentEnd) {
		body, err := r.endBody(name, in)
		if err == nil {
			err = r.nc.Publish(Subject(name, AgentEnd), body)
		}
		if err != nil {
			r.cfg.Logger.Warn().Err(err).Str("hook", name).Str("run_id", in.RunID).Msg("hooks: agent_end not sent")
		}
	}
}

// endBody encodes an EndEvent that fits the connection's max payload.
func (r *Registry) endBody(name string, in RunEnd) ([]byte, error) {
	limit := int(r.nc.MaxPayload()) - endHeadroom
	ev := EndEvent{Hook: name, SessionKey: in.SessionKey, RunID: in.RunID, Attempt: in.Attempt, Result: in.Result}
	body, err := json.Marshal(ev)
	if err != nil || limit <= 0 || len(body) <= limit || in.Result == nil {
		return body, err
	}
	res := *in.Result
	res.Payloads = slices.Clone(res.Payloads)
	ev.Result, ev.Truncated = &res, true
	for _, n := range []int{limit / (2 * max(1, len(res.Payloads))), 256, len("…")} {
		for i := range res.Payloads {
			res.Payloads[i].Text = cut(in.Result.Payloads[i].Text, n)
		}
		if body, err = json.Marshal(ev); err != nil || len(body) <= limit {
			return body, err
		}
	}
	return nil, fmt.Errorf("hooks: agent_end of run %s does not fit in one message (%d bytes)", in.RunID, len(body))
}

var (
	_ agentprompt.Hook = startHook{}
)
