// Package provider declares what the runner needs from a model provider: a
// streaming call that turns a request (model, system prompt, messages, tools,
// thinking level) into the pi-ai event protocol and a finished assistant
// message, and the typed errors the run loop branches on.
//
// Adapters live in sub-packages, one per wire API (anthropic-messages,
// openai-completions, openai-responses, google-generative-ai); the built-in
// deterministic provider is provider/scripted.
package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lanefleet/lanefleet/message"
)

// ThinkingLevel is a reasoning effort. The empty string and "off" both mean
// no reasoning.
type ThinkingLevel string

// Thinking levels, lowest first.
const (
	ThinkingOff     ThinkingLevel = "off"
	ThinkingMinimal ThinkingLevel = "minimal"
	ThinkingLow     ThinkingLevel = "low"
	ThinkingMedium  ThinkingLevel = "medium"
	ThinkingHigh    ThinkingLevel = "high"
	ThinkingXHigh   ThinkingLevel = "xhigh"
)

// Model describes one model a provider serves.
type Model struct {
	ID            string    `json:"id"`                      // model id sent on the wire, e.g. "claude-sonnet-4-6"
	Provider      string    `json:"provider"`                // vendor/account key, e.g. "anthropic", "openrouter"
	API           string    `json:"api"`                     // wire API, e.g. "anthropic-messages"
	BaseURL       string    `json:"baseUrl,omitempty"`       // endpoint; empty = the SDK default
	ContextWindow int       `json:"contextWindow,omitempty"` // tokens
	MaxTokens     int       `json:"maxTokens,omitempty"`     // max output tokens
	Reasoning     bool      `json:"reasoning,omitempty"`     // supports thinking levels
	Input         []string  `json:"input,omitempty"`         // "text", "image"
	Cost          ModelCost `json:"cost,omitzero"`           // USD per million tokens
}

// ModelCost is a model's price in USD per million tokens.
type ModelCost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
}

// Ref returns "provider/id".
func (m Model) Ref() string { return m.Provider + "/" + m.ID }

// Tool is a tool definition offered to the model.
type Tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"` // JSON Schema object
}

// Secret is a credential that never prints itself.
type Secret string

// String redacts the secret.
func (Secret) String() string { return "[redacted]" }

// GoString redacts the secret.
func (Secret) GoString() string { return "[redacted]" }

// MarshalText redacts the secret, so it never reaches logs or events.
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// Reveal returns the secret's value for the one place that sends it.
func (s Secret) Reveal() string { return string(s) }

// Request is one model call.
type Request struct {
	Model        Model
	SystemPrompt string
	Messages     []message.Message
	Tools        []Tool
	Thinking     ThinkingLevel
	MaxTokens    int      // 0 = min(model.MaxTokens, 32000)
	Temperature  *float64 // nil = provider default
	APIKey       Secret
	SessionID    string // for prompt caching / affinity
	// Immutable promises that Messages[:Immutable] are never written
	// again (0 promises nothing): a caller that keeps a session's history
	// in one array and only appends to it says so, and an adapter's wire
	// cache then need not compare again the messages of that array it saw
	// in an earlier request that made the same promise of them.
	Immutable int
}

// EventType is the kind of a streaming event (the pi-ai protocol).
type EventType string

// Streaming event types.
const (
	EventStart         EventType = "start"
	EventTextStart     EventType = "text_start"
	EventTextDelta     EventType = "text_delta"
	EventTextEnd       EventType = "text_end"
	EventThinkingStart EventType = "thinking_start"
	EventThinkingDelta EventType = "thinking_delta"
	EventThinkingEnd   EventType = "thinking_end"
	EventToolCallStart EventType = "toolcall_start"
	EventToolCallDelta EventType = "toolcall_delta"
	EventToolCallEnd   EventType = "toolcall_end"
	EventDone          EventType = "done"
	EventError         EventType = "error"
)

// Event is one streaming event. ContentIndex indexes the content of the
// assistant message being built.
type Event struct {
	Type         EventType
	ContentIndex int
	Delta        string             // *_delta: the appended text or raw JSON fragment
	Content      string             // text_end/thinking_end: the full block text
	ToolCall     *message.Block     // toolcall_end: the final block
	Reason       message.StopReason // done/error
	Message      *message.Message   // done/error: the finished message
}

// Provider streams one model call. Stream calls emit for every event in order,
// from the calling goroutine, and returns the finished assistant message. On
// failure it still returns the assistant message built so far (StopReason
// error or aborted, ErrorMessage set) together with an error, which is an
// *Error when the failure was classified.
type Provider interface {
	Stream(ctx context.Context, req *Request, emit func(Event)) (message.Message, error)
}

// Func adapts a function to Provider.
type Func func(ctx context.Context, req *Request, emit func(Event)) (message.Message, error)

// Stream calls f.
func (f Func) Stream(ctx context.Context, req *Request, emit func(Event)) (message.Message, error) {
	return f(ctx, req, emit)
}

// Reason is why a provider call failed, as the run loop's failover logic sees it.
type Reason string

// Failover reasons.
const (
	ReasonRateLimit       Reason = "rate_limit"
	ReasonOverloaded      Reason = "overloaded"
	ReasonAuth            Reason = "auth"
	ReasonAuthPermanent   Reason = "auth_permanent"
	ReasonBilling         Reason = "billing"
	ReasonTimeout         Reason = "timeout"
	ReasonFormat          Reason = "format"
	ReasonModelNotFound   Reason = "model_not_found"
	ReasonContextOverflow Reason = "context_overflow"
	ReasonRoleOrdering    Reason = "role_ordering"
	ReasonImageSize       Reason = "image_size"
	ReasonAborted         Reason = "aborted"
	ReasonUnknown         Reason = "unknown"
)

// Error is a classified provider failure.
type Error struct {
	Reason     Reason
	Status     int           // HTTP status, 0 when none
	RetryAfter time.Duration // server-requested delay, 0 when none
	Message    string        // the provider's message
	Err        error         // underlying cause, may be nil
}

func (e *Error) Error() string {
	s := "provider: " + string(e.Reason)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the failover reason of err, ReasonAborted for context
// cancellation, or ReasonUnknown.
func ReasonOf(err error) Reason {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Reason
	}
	if errors.Is(err, context.Canceled) {
		return ReasonAborted
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ReasonTimeout
	}
	return ReasonUnknown
}
