package tracing

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestParseTraceparent: the W3C Trace Context rules a sender's header is
// held to.
func TestParseTraceparent(t *testing.T) {
	t.Parallel()
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, c := range []struct {
		in      string
		ok      bool
		sampled bool
	}{
		{"00-" + tid + "-" + sid + "-01", true, true},
		{"00-" + tid + "-" + sid + "-00", true, false},
		{"00-" + tid + "-" + sid + "-ff", true, true},                 // unknown flags dropped, sampled kept
		{"01-" + tid + "-" + sid + "-01-what-comes-next", true, true}, // a later version may add fields
		{"00-" + tid + "-" + sid + "-01-extra", false, false},         // version 00 has exactly four
		{"01-" + tid + "-" + sid + "-01x", false, false},              // a later version's extra starts with '-'
		{"ff-" + tid + "-" + sid + "-01", false, false},               // version ff is invalid
		{"00-" + strings.ToUpper(tid) + "-" + sid + "-01", false, false},
		{"00-00000000000000000000000000000000-" + sid + "-01", false, false},
		{"00-" + tid + "-0000000000000000-01", false, false},
		{"00-" + tid + "-" + sid + "-0", false, false},
		{"00_" + tid + "-" + sid + "-01", false, false},
		{"", false, false},
	} {
		sc, ok := ParseTraceparent(c.in)
		if ok != c.ok || ok && (sc.IsSampled() != c.sampled || !sc.Remote || sc.TraceID.String() != tid || sc.SpanID.String() != sid) {
			t.Errorf("%q: %+v %v", c.in, sc, ok)
		}
		if ok {
			if got := Traceparent(sc); got[2:52] != c.in[2:52] {
				t.Errorf("%q written back as %q", c.in, got)
			}
		}
	}
	long := strings.Repeat("a", maxTracestate+1)
	for state, kept := range map[string]bool{"vendor=abc,other=1": true, long: false, "bad\nstate": false} {
		sc := SpanContextFromContext(ContextWithTraceparent(context.Background(), "00-"+tid+"-"+sid+"-01", state))
		if !sc.IsValid() || (sc.State == state) != kept {
			t.Errorf("tracestate %.20q: kept %q", state, sc.State)
		}
	}
}

// collect is an exporter keeping what it is handed; block, when set,
// holds exports until closed.
type collect struct {
	mu    sync.Mutex
	spans []SpanData
	block chan struct{}
	stop  bool
}

func (c *collect) ExportSpans(_ context.Context, s []SpanData) error {
	if c.block != nil {
		<-c.block
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, s...)
	return nil
}

func (c *collect) Shutdown(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop = true
	return nil
}

func (c *collect) byName() map[string]SpanData {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]SpanData{}
	for _, s := range c.spans {
		out[s.Name] = s
	}
	return out
}

// TestSpans: children link to their parent (local or remote), attributes
// set again take the new value, status keeps OK over Error over Unset,
// the batcher exports at a flush and at shutdown, and nothing after.
func TestSpans(t *testing.T) {
	t.Parallel()
	exp := &collect{}
	p, err := NewProvider(ProviderConfig{Exporter: exp, Resource: []KeyValue{String("service.name", "x")}, BatchDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tr := p.Tracer("scope", "v1")
	remote, _ := ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx, turn := tr.Start(ContextWithSpanContext(context.Background(), remote), "turn", WithSpanKind(SpanKindConsumer), WithAttributes(String("a", "1")))
	_, call := tr.Start(ctx, "call")
	call.SetAttributes(String("a", "2"), Int("n", 3))
	call.SetAttributes(String("a", "3"))
	call.AddEvent("retry", Int("n", 1))
	call.SetStatus(StatusError, "rate limited")
	call.SetStatus(StatusUnset, "")
	call.End()
	call.SetAttributes(String("late", "x")) // after End: ignored
	turn.SetStatus(StatusOK, "ignored description")
	turn.SetStatus(StatusError, "too late: OK is final")
	turn.End()
	turn.End()
	if err := p.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := exp.byName()
	ts, cs := got["turn"], got["call"]
	if len(exp.spans) != 2 || ts.Parent != remote || ts.SpanContext.TraceID != remote.TraceID || ts.Kind != SpanKindConsumer {
		t.Fatalf("turn %+v (of %d spans)", ts, len(exp.spans))
	}
	if cs.Parent != turn.SpanContext() || cs.SpanContext.TraceID != remote.TraceID || cs.Kind != SpanKindInternal || cs.Scope != (Scope{"scope", "v1"}) {
		t.Fatalf("call %+v", cs)
	}
	if len(cs.Attributes) != 2 || cs.Attributes[0].Value.Str != "3" || len(cs.Events) != 1 || cs.End.Before(cs.Start) {
		t.Errorf("call attributes %v, events %v", cs.Attributes, cs.Events)
	}
	if cs.Status != (Status{StatusError, "rate limited"}) || ts.Status != (Status{Code: StatusOK}) {
		t.Errorf("status call %v, turn %v", cs.Status, ts.Status)
	}
	if cs.Resource == nil || cs.Resource.Attributes[0].Value.Str != "x" {
		t.Errorf("resource %v", cs.Resource)
	}
	_, last := tr.Start(context.Background(), "last")
	last.End()
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := exp.byName()["last"]; !ok || !exp.stop {
		t.Fatal("shutdown did not export the last span and stop the exporter")
	}
	_, after := tr.Start(context.Background(), "after")
	after.End()
	if _, ok := exp.byName()["after"]; ok {
		t.Error("a span after shutdown was exported")
	}
}

// TestSamplers: each OTEL_TRACES_SAMPLER value; an unsampled span is not
// exported but passes its ids, unsampled, on; a nil tracer leaves the
// context as it is, so a parent still reaches the next process.
func TestSamplers(t *testing.T) {
	t.Parallel()
	sampled := SpanContext{TraceID: TraceID{1}, SpanID: SpanID{1}, Flags: FlagSampled, Remote: true}
	unsampled := SpanContext{TraceID: TraceID{1}, SpanID: SpanID{1}, Remote: true}
	low, high := TraceID{}, TraceID{15: 1}
	for i := 8; i < 16; i++ {
		high[i] = 0xff
	}
	low[15] = 2
	for _, c := range []struct {
		env, arg                           string
		root, underSampled, underUnsampled bool
		lowKept, highKept                  bool
	}{
		{"", "", true, true, false, true, true},
		{"parentbased_always_on", "", true, true, false, true, true},
		{"always_on", "", true, true, true, true, true},
		{"always_off", "", false, false, false, false, false},
		{"parentbased_always_off", "", false, true, false, false, false},
		{"traceidratio", "0.5", true, false, true, true, false}, // the parent does not count
		{"parentbased_traceidratio", "0.5", true, true, false, true, false},
		{"traceidratio", "0", false, false, false, false, false},
	} {
		s, err := SamplerFromEnv(func(k string) string {
			return map[string]string{"OTEL_TRACES_SAMPLER": c.env, "OTEL_TRACES_SAMPLER_ARG": c.arg}[k]
		})
		if err != nil {
			t.Fatalf("%s: %v", c.env, err)
		}
		if s(SpanContext{}, low) != c.lowKept || s(SpanContext{}, high) != c.highKept ||
			s(sampled, high) != c.underSampled || s(unsampled, low) != c.underUnsampled {
			t.Errorf("%s %s: root %v/%v, under sampled %v, under unsampled %v", c.env, c.arg,
				s(SpanContext{}, low), s(SpanContext{}, high), s(sampled, high), s(unsampled, low))
		}
	}
	for _, bad := range []map[string]string{{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}} {
		if _, err := SamplerFromEnv(func(k string) string { return bad[k] }); !errors.Is(err, ErrSampler) {
			t.Errorf("%v: %v", bad, err)
		}
	}

	exp := &collect{}
	p, _ := NewProvider(ProviderConfig{Exporter: exp, Sampler: ParentBased(AlwaysOn)})
	defer func() { _ = p.Shutdown(context.Background()) }()
	ctx, s := p.Tracer("t", "").Start(ContextWithSpanContext(context.Background(), unsampled), "not recorded")
	_, child := p.Tracer("t", "").Start(ctx, "child")
	child.End()
	s.End()
	_ = p.ForceFlush(t.Context())
	if len(exp.spans) != 0 || !s.SpanContext().IsValid() || s.SpanContext().IsSampled() || child.SpanContext().TraceID != unsampled.TraceID {
		t.Errorf("unsampled: exported %d, span %+v, child %+v", len(exp.spans), s.SpanContext(), child.SpanContext())
	}

	var none *Tracer
	parent := ContextWithSpanContext(context.Background(), sampled)
	ctx, span := none.Start(parent, "nothing")
	span.SetAttributes(String("a", "b"))
	span.End()
	if ctx != parent || SpanContextFromContext(ctx) != sampled {
		t.Error("a nil tracer changed the context")
	}
}

// TestQueueFull: spans ending while the queue is full are dropped and
// counted, never waited for.
func TestQueueFull(t *testing.T) {
	t.Parallel()
	exp := &collect{block: make(chan struct{})}
	p, _ := NewProvider(ProviderConfig{Exporter: exp, MaxQueue: 2, MaxExportBatch: 1})
	tr := p.Tracer("t", "")
	for range 10 {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
	if p.Dropped() == 0 {
		t.Error("nothing dropped with the exporter stuck and a queue of 2")
	}
	close(exp.block)
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.spans); int64(n)+p.Dropped() != 10 {
		t.Errorf("%d exported + %d dropped != 10", n, p.Dropped())
	}
}
