package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestInjectExtract: a span context written into NATS headers is read back
// as the remote parent; no span writes nothing; a sender's malformed
// traceparent is ignored.
func TestInjectExtract(t *testing.T) {
	t.Parallel()
	sc := SpanContext{TraceID: TraceID{1, 2, 3}, SpanID: SpanID{4, 5}, Flags: FlagSampled}
	h := nats.Header{}
	Inject(ContextWithSpanContext(context.Background(), sc), h)
	if h.Get("traceparent") == "" {
		t.Fatalf("no traceparent: %v", h)
	}
	got := SpanContextFromContext(Extract(context.Background(), h))
	if !got.Remote || got.TraceID != sc.TraceID || got.SpanID != sc.SpanID || !got.IsSampled() {
		t.Fatalf("extracted %v, want %v", got, sc)
	}

	empty := nats.Header{}
	Inject(context.Background(), empty)
	if len(empty) != 0 {
		t.Errorf("no span wrote %v", empty)
	}
	for _, bad := range []string{"", "00-zz-yy-01", "00-00000000000000000000000000000000-0000000000000000-01", "junk"} {
		if sc := SpanContextFromContext(Extract(context.Background(), nats.Header{"traceparent": {bad}})); sc.IsValid() {
			t.Errorf("traceparent %q gave %v", bad, sc)
		}
	}
	if ctx := Extract(context.Background(), nil); SpanContextFromContext(ctx).IsValid() {
		t.Error("nil headers gave a span context")
	}
}
