package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// TestInjectExtract: a span context written into NATS headers is read back
// as the remote parent; no span writes nothing; a sender's malformed
// traceparent is ignored.
func TestInjectExtract(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	h := nats.Header{}
	Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
	if h.Get("traceparent") == "" {
		t.Fatalf("no traceparent: %v", h)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), h))
	if !got.IsRemote() || got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() {
		t.Fatalf("extracted %v, want %v", got, sc)
	}

	empty := nats.Header{}
	Inject(context.Background(), empty)
	if len(empty) != 0 {
		t.Errorf("no span wrote %v", empty)
	}
	for _, bad := range []string{"", "00-zz-yy-01", "00-00000000000000000000000000000000-0000000000000000-01", "junk"} {
		if sc := trace.SpanContextFromContext(Extract(context.Background(), nats.Header{"traceparent": {bad}})); sc.IsValid() {
			t.Errorf("traceparent %q gave %v", bad, sc)
		}
	}
	if ctx := Extract(context.Background(), nil); trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("nil headers gave a span context")
	}
}
