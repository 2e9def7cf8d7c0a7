package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/events"
)

// Kind is the moment of a run a hook endpoint is called at.
type Kind string

// The kinds of hooks (OpenClaw's plugin hook names).
const (
	// BeforeAgentStart is called before a run's prompt goes to the model:
	// it may prepend context to the prompt or replace the system prompt.
	BeforeAgentStart Kind = "before_agent_start"
	// BeforeToolCall is called before each call of a worker tool: it may
	// allow it, block it with a reason, or rewrite its arguments.
	BeforeToolCall Kind = "before_tool_call"
	// AgentEnd is told each finished run's result; nobody waits for it.
	AgentEnd Kind = "agent_end"
)

// Kinds lists every kind.
func Kinds() []Kind { return []Kind{BeforeAgentStart, BeforeToolCall, AgentEnd} }

// Wire constants shared by hook services and workers.
const (
	// ServiceName is the micro service name hooks are served under and
	// discovered by.
	ServiceName = "lanefleet-hooks"
	// SubjectPrefix opens every hook subject: agent.hook.<name>.<kind>.
	SubjectPrefix = "agent.hook."
	// MetaHook is the endpoint metadata key holding the hook's name.
	MetaHook = "hook"
	// MetaKind is the endpoint metadata key holding the hook's kind.
	MetaKind = "kind"
	// HeaderTimeout, on a request, is how many milliseconds the worker
	// waits for the reply; the service cancels the handler's context then.
	HeaderTimeout = "Lanefleet-Hook-Timeout-Ms"
)

// Bounds of what a hook may send back; a reply over them is malformed.
const (
	// MaxReplyBytes bounds a reply body.
	MaxReplyBytes = 1 << 20
	// MaxTextBytes bounds a reply's prependContext and systemPrompt each.
	MaxTextBytes = 256 << 10
	// MaxReasonBytes is where a block reason is cut (with "…").
	MaxReasonBytes = 2000
	// MaxDepth bounds the nesting of rewritten arguments.
	MaxDepth = 64
	// MaxTimeout is the longest a worker waits for one hook.
	MaxTimeout = time.Minute
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether name can be a hook's name: 1 to 64 ASCII
// letters, digits, '_' or '-' (one subject token).
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Subject returns the subject of hook name's kind endpoint.
func Subject(name string, kind Kind) string { return SubjectPrefix + name + "." + string(kind) }

// StartEvent is what a before_agent_start hook sees of the run about to
// start.
type StartEvent struct {
	Hook       string `json:"hook"`
	SessionKey string `json:"sessionKey,omitempty"`
	RunID      string `json:"runId,omitempty"`
	// Prompt is the user's prompt of the run.
	Prompt string `json:"prompt"`
	// SystemPrompt is the system prompt the worker built for the run.
	SystemPrompt string `json:"systemPrompt,omitempty"`
}

// StartResult is a before_agent_start hook's contribution; empty fields
// contribute nothing.
type StartResult struct {
	// PrependContext is text put before the user's prompt (the values of
	// several hooks are joined with blank lines).
	PrependContext string `json:"prependContext,omitempty"`
	// SystemPrompt replaces the run's system prompt (the last hook to set
	// one wins).
	SystemPrompt string `json:"systemPrompt,omitempty"`
}

// ToolCallEvent is the call a before_tool_call hook decides on.
type ToolCallEvent struct {
	Hook       string         `json:"hook"`
	SessionKey string         `json:"sessionKey,omitempty"`
	RunID      string         `json:"runId,omitempty"`
	ToolCallID string         `json:"toolCallId"`
	ToolName   string         `json:"toolName"`
	Params     map[string]any `json:"params"`
}

// ToolCallResult is a before_tool_call hook's decision. The zero value
// allows the call as made.
type ToolCallResult struct {
	// Block refuses the call; the model sees BlockReason.
	Block       bool   `json:"block,omitempty"`
	BlockReason string `json:"blockReason,omitempty"`
	// Params, when set, replace the call's arguments (a JSON object).
	Params map[string]any `json:"params,omitempty"`
}

// EndEvent is a finished run, sent to agent_end hooks.
type EndEvent struct {
	Hook       string `json:"hook"`
	SessionKey string `json:"sessionKey,omitempty"`
	RunID      string `json:"runId,omitempty"`
	// Attempt counts deliveries of the run's message: a run redone after
	// its worker died ends again with the same RunID and a higher Attempt.
	Attempt int            `json:"attempt,omitempty"`
	Result  *events.Result `json:"result"`
	// Truncated says the result's payload texts were cut to fit one
	// message.
	Truncated bool `json:"truncated,omitempty"`
}

// errorBody is the body of an error reply.
type errorBody struct {
	Error string `json:"error"`
}

// Error codes a service puts in the Nats-Service-Error-Code header.
const (
	CodeBadRequest  = "400" // the request is not a valid event
	CodeFailed      = "500" // the handler returned an error or panicked
	CodeUnavailable = "503" // the service is stopping
	CodeTimeout     = "504" // the worker's timeout passed while the handler ran
)

// Errors a hook call wraps; test with errors.Is.
var (
	// ErrUnavailable: no process serves the hook, or it was stopping.
	ErrUnavailable = errors.New("hooks: hook not available")
	// ErrTimeout: no reply within the hook timeout.
	ErrTimeout = errors.New("hooks: hook timed out")
	// ErrFailed: the hook answered with an error.
	ErrFailed = errors.New("hooks: hook failed")
	// ErrBadReply: the reply is malformed or over the bounds.
	ErrBadReply = errors.New("hooks: malformed reply")
	// ErrStopped is the cause of a handler's context when its Service is
	// stopped before it returns.
	ErrStopped = errors.New("hooks: service stopped")
)

// decodeStartResult decodes and bounds a before_agent_start reply.
func decodeStartResult(data []byte) (StartResult, error) {
	var r StartResult
	if err := decodeReply(data, &r); err != nil {
		return StartResult{}, err
	}
	for field, s := range map[string]string{"prependContext": r.PrependContext, "systemPrompt": r.SystemPrompt} {
		if len(s) > MaxTextBytes {
			return StartResult{}, fmt.Errorf("%w: %s has %d bytes; the limit is %d", ErrBadReply, field, len(s), MaxTextBytes)
		}
	}
	return r, nil
}

// decodeToolCallResult decodes and bounds a before_tool_call reply: the
// reason is cut to MaxReasonBytes, params nested deeper than MaxDepth are
// refused.
func decodeToolCallResult(data []byte) (ToolCallResult, error) {
	var r ToolCallResult
	if err := decodeReply(data, &r); err != nil {
		return ToolCallResult{}, err
	}
	r.BlockReason = cut(strings.TrimSpace(r.BlockReason), MaxReasonBytes)
	return r, nil
}

// decodeReply checks a reply's size and nesting and decodes it into v,
// which must be a JSON object.
func decodeReply(data []byte, v any) error {
	if len(data) > MaxReplyBytes {
		return fmt.Errorf("%w: %d bytes; the limit is %d", ErrBadReply, len(data), MaxReplyBytes)
	}
	if d := depth(data); d > MaxDepth+1 {
		return fmt.Errorf("%w: nested %d deep; the limit is %d", ErrBadReply, d, MaxDepth)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the JSON object", ErrBadReply)
	}
	return nil
}

// depth returns the deepest nesting of objects and arrays in JSON text
// (strings skipped), without decoding it.
func depth(data []byte) int {
	d, deepest, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			d++
			deepest = max(deepest, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return deepest
}

// cut shortens s to at most n bytes, ending with "…" when cut, never
// splitting a rune.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// headerLine makes msg fit a header value: one line, at most 1024 bytes.
func headerLine(msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if msg == "" {
		return "hook failed"
	}
	return cut(msg, 1024)
}
