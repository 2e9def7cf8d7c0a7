// Package tracing carries OpenTelemetry trace context through NATS and names
// the span attributes the fleet records. A client's Send injects the W3C
// trace context (traceparent, tracestate) of its context into the inbound
// message's headers; the worker that runs the turn extracts it, so the
// caller's trace continues into the turn, its attempts, model calls and
// tool calls.
//
// The package uses the OpenTelemetry API only: with no SDK configured the
// spans cost nothing. The worker's SDK and OTLP/HTTP exporter live in
// tracing/otlp.
package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// propagator is W3C Trace Context: what every OpenTelemetry SDK reads, and
// stateless, so no process-global propagator is needed.
var propagator = propagation.TraceContext{}

// Inject writes ctx's span context into h (traceparent, tracestate). It
// writes nothing when ctx carries no valid span context.
func Inject(ctx context.Context, h nats.Header) {
	propagator.Inject(ctx, headerCarrier(h))
}

// Extract returns ctx with the remote span context h carries, if any. A
// malformed traceparent is ignored (it is a sender's header).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, headerCarrier(h))
}

// headerCarrier adapts nats.Header, whose keys are case-sensitive, to the
// propagator: the W3C header names are lower case.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Span and attribute names: the OpenTelemetry GenAI semantic conventions
// where they have one, lanefleet.* for the fleet's own.
const (
	// Operation names (gen_ai.operation.name) and the span names built
	// from them.
	OpInvokeAgent = "invoke_agent" // a turn
	OpChat        = "chat"         // a model call
	OpExecuteTool = "execute_tool" // a tool call

	AttrOperation      = "gen_ai.operation.name"
	AttrSystem         = "gen_ai.system"        // the provider, as older conventions name it
	AttrProvider       = "gen_ai.provider.name" // the provider, as current conventions name it
	AttrRequestModel   = "gen_ai.request.model"
	AttrResponseModel  = "gen_ai.response.model"
	AttrInputTokens    = "gen_ai.usage.input_tokens"
	AttrOutputTokens   = "gen_ai.usage.output_tokens"
	AttrFinishReasons  = "gen_ai.response.finish_reasons"
	AttrConversationID = "gen_ai.conversation.id"
	AttrAgentName      = "gen_ai.agent.name"
	AttrToolName       = "gen_ai.tool.name"
	AttrToolCallID     = "gen_ai.tool.call.id"
	AttrErrorType      = "error.type"

	AttrRun         = "lanefleet.run_id"
	AttrAttempt     = "lanefleet.attempt"
	AttrSession     = "lanefleet.session.fingerprint" // never the session key
	AttrWorker      = "lanefleet.worker"
	AttrOutcome     = "lanefleet.outcome"
	AttrCostUSD     = "lanefleet.cost_usd"
	AttrCacheRead   = "lanefleet.usage.cache_read_tokens"
	AttrCacheWrite  = "lanefleet.usage.cache_write_tokens"
	AttrQueueWaitMs = "lanefleet.queue_wait_ms"
)

// AttrParentSession and AttrParentRun name a sub-agent's parent on its
// turns' spans (the parent's key as a fingerprint, as AttrSession).
const (
	AttrParentSession = "lanefleet.parent.session.fingerprint"
	AttrParentRun     = "lanefleet.parent.run"
)

// ScopeName is the instrumentation scope of the fleet's spans.
const ScopeName = "github.com/lanefleet/lanefleet"
