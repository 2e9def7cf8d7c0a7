// Package tracing records the fleet's spans and carries W3C trace context
// through NATS. A client's Send writes the trace context (traceparent,
// tracestate) of its context into the inbound message's headers; the
// worker that runs the turn reads it, so the caller's trace continues into
// the turn, its attempts, model calls and tool calls.
//
// tracing.go holds the propagation and the span and attribute names (the
// OpenTelemetry GenAI conventions); span.go the span context, spans and
// tracers; attr.go attributes; provider.go the provider that samples and
// batches ended spans for an Exporter. tracing/otlp is the exporter: it
// encodes the spans as OTLP/HTTP protobuf. With no provider configured a
// nil *Tracer starts no spans and costs nothing.
//
// The package is a small tracer of its own rather than the OpenTelemetry
// SDK, whose build cost was more than its use here; what leaves the
// process is the same protocol, so any OpenTelemetry collector reads it.
// A caller tracing with the OpenTelemetry API hands its span to Send with
// ContextWithTraceparent (see docs/client.md).
package tracing

import (
	"context"
	"encoding/hex"

	"github.com/nats-io/nats.go"
)

// W3C Trace Context header names.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// maxTracestate bounds the tracestate passed on (W3C: at least 512
// characters should be propagated; this keeps no more).
const maxTracestate = 512

// Inject writes ctx's span context into h (traceparent, tracestate). It
// writes nothing when ctx carries no valid span context.
func Inject(ctx context.Context, h nats.Header) {
	sc := SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	h[HeaderTraceparent] = []string{Traceparent(sc)}
	if sc.State != "" {
		h[HeaderTracestate] = []string{sc.State}
	}
}

// Traceparent returns sc's traceparent header value (version 00).
func Traceparent(sc SpanContext) string {
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, sc.TraceID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sc.SpanID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, []byte{sc.Flags & FlagSampled})
	return string(b)
}

// Extract returns ctx with the remote span context h carries, if any. A
// malformed traceparent is ignored (it is a sender's header).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return ContextWithTraceparent(ctx, first(h[HeaderTraceparent]), first(h[HeaderTracestate]))
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// ContextWithTraceparent returns ctx with the remote parent a traceparent
// (and tracestate) header names; ctx unchanged when traceparent is not
// valid. A tracestate longer than 512 bytes or with a byte outside
// printable ASCII is left out.
//
// A caller tracing with the OpenTelemetry API continues its trace into a
// turn by handing its span's headers to Send's context:
//
//	c := propagation.MapCarrier{}
//	propagation.TraceContext{}.Inject(ctx, c)
//	ctx = tracing.ContextWithTraceparent(ctx, c["traceparent"], c["tracestate"])
func ContextWithTraceparent(ctx context.Context, traceparent, tracestate string) context.Context {
	sc, ok := ParseTraceparent(traceparent)
	if !ok {
		return ctx
	}
	if len(tracestate) <= maxTracestate && printable(tracestate) {
		sc.State = tracestate
	}
	return ContextWithSpanContext(ctx, sc)
}

// ParseTraceparent reads a traceparent header value: the remote span
// context, or false when it is malformed (W3C Trace Context: version ff
// and all-zero ids are invalid, version 00 has exactly four fields, later
// versions may add fields after them).
func ParseTraceparent(s string) (SpanContext, bool) {
	const n = 55 // 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(s) < n || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return SpanContext{}, false
	}
	var ver [1]byte
	var flags [1]byte
	sc := SpanContext{Remote: true}
	if !lowerHex(s[:2], ver[:]) || ver[0] == 0xff || !lowerHex(s[3:35], sc.TraceID[:]) ||
		!lowerHex(s[36:52], sc.SpanID[:]) || !lowerHex(s[53:55], flags[:]) {
		return SpanContext{}, false
	}
	if len(s) > n && (ver[0] == 0 || s[n] != '-') {
		return SpanContext{}, false
	}
	sc.Flags = flags[0] & FlagSampled
	return sc, sc.IsValid()
}

// lowerHex decodes lower-case hex into dst, refusing upper case.
func lowerHex(s string, dst []byte) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
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
