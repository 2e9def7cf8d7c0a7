package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lanefleet/lanefleet/tracing"
)

// receiver is an OTLP/HTTP trace receiver: it decodes each request with
// the protocol's generated types, so what the exporter writes by hand is
// checked against the real schema.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*coltrace.ExportTraceServiceRequest
	headers  []http.Header
	status   []int // answers to give, in order; then 200
	got      chan struct{}
}

func newReceiver(t *testing.T, status ...int) *receiver {
	t.Helper()
	r := &receiver{status: status, got: make(chan struct{}, 100)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, _ := io.ReadAll(body)
		r.mu.Lock()
		code := http.StatusOK
		if len(r.status) > 0 {
			code, r.status = r.status[0], r.status[1:]
		}
		r.headers = append(r.headers, req.Header.Clone())
		if code == http.StatusOK {
			var m coltrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(data, &m); err != nil {
				r.mu.Unlock()
				t.Errorf("receiver: not an ExportTraceServiceRequest: %v", err)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.requests = append(r.requests, &m)
		}
		r.mu.Unlock()
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "0")
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(code)
		r.got <- struct{}{}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, req := range r.requests {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				out = append(out, ss.Spans...)
			}
		}
	}
	return out
}

// TestExportDecodesAsOTLP: spans of every shape the SDK makes arrive with
// their ids, parent, kind, times, attributes of every type, events, links
// and status, under their resource and scope.
func TestExportDecodesAsOTLP(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	exp, err := New(Config{URL: rcv.URL + "/v1/traces", Headers: map[string]string{"x-api-key": "k123"}, Gzip: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := NewTracerProvider(exp, Service{Name: "lanefleet-worker", Version: "v9", Instance: "w-1"},
		func(k string) string {
			return map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test,team=a%20b"}[k]
		})
	if err != nil {
		t.Fatal(err)
	}
	tr := tp.Tracer("scope-a", "1.0")
	ctx, parent := tr.Start(context.Background(), "parent", tracing.WithSpanKind(tracing.SpanKindConsumer))
	_, child := tr.Start(ctx, "child", tracing.WithSpanKind(tracing.SpanKindClient),
		tracing.WithLinks(tracing.Link{SpanContext: parent.SpanContext(), Attributes: []tracing.KeyValue{tracing.String("why", "link")}}))
	child.SetAttributes(tracing.String("s", ""), tracing.Bool("b", false), tracing.Int64("i", -7), tracing.Float64("f", 0.5),
		tracing.StringSlice("ss", []string{"stop", ""}), tracing.Int64Slice("is", []int64{1, 2}), tracing.BoolSlice("bs", []bool{true}),
		tracing.Float64Slice("fs", []float64{1.5}))
	child.AddEvent("retry", tracing.Int("n", 2))
	child.SetStatus(tracing.StatusError, "rate limited")
	child.End()
	parent.SetStatus(tracing.StatusOK, "")
	parent.End()
	if err := tp.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h := rcv.headers[0]; h.Get("x-api-key") != "k123" || h.Get("Content-Type") != "application/x-protobuf" || h.Get("Content-Encoding") != "gzip" {
		t.Fatalf("headers %v", h)
	}
	req := rcv.requests[0]
	rs := req.ResourceSpans[0]
	res := map[string]string{}
	for _, kv := range rs.Resource.Attributes {
		res[kv.Key] = kv.Value.GetStringValue()
	}
	if res["service.name"] != "lanefleet-worker" || res["service.version"] != "v9" || res["service.instance.id"] != "w-1" ||
		res["deployment.environment"] != "test" || res["team"] != "a b" {
		t.Fatalf("resource %v", res)
	}
	if sc := rs.ScopeSpans[0].Scope; sc.Name != "scope-a" || sc.Version != "1.0" {
		t.Fatalf("scope %v", sc)
	}
	byName := map[string]*tracepb.Span{}
	for _, s := range rcv.spans() {
		byName[s.Name] = s
	}
	p, c := byName["parent"], byName["child"]
	if p == nil || c == nil {
		t.Fatalf("spans %v", byName)
	}
	psc := parent.SpanContext()
	ptid, psid := psc.TraceID, psc.SpanID
	if !bytes.Equal(c.TraceId, ptid[:]) || !bytes.Equal(c.ParentSpanId, psid[:]) || !bytes.Equal(p.SpanId, psid[:]) || len(p.ParentSpanId) != 0 {
		t.Fatalf("ids: child %x/%x parent %x", c.TraceId, c.ParentSpanId, p.SpanId)
	}
	if p.Kind != tracepb.Span_SPAN_KIND_CONSUMER || c.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("kinds %v %v", p.Kind, c.Kind)
	}
	if c.StartTimeUnixNano == 0 || c.EndTimeUnixNano < c.StartTimeUnixNano {
		t.Fatalf("times %d %d", c.StartTimeUnixNano, c.EndTimeUnixNano)
	}
	got := map[string]string{}
	for _, kv := range c.Attributes {
		got[kv.Key] = kv.Value.String()
	}
	for k, want := range map[string]string{"s": `string_value:""`, "b": `bool_value:false`, "i": `int_value:-7`, "f": `double_value:0.5`,
		"ss": `array_value:{values:{string_value:"stop"} values:{string_value:""}}`, "is": `array_value:{values:{int_value:1} values:{int_value:2}}`,
		"bs": `array_value:{values:{bool_value:true}}`, "fs": `array_value:{values:{double_value:1.5}}`} {
		if norm(got[k]) != norm(want) {
			t.Errorf("attribute %s = %s, want %s", k, got[k], want)
		}
	}
	if len(c.Events) != 1 || c.Events[0].Name != "retry" || c.Events[0].Attributes[0].Value.GetIntValue() != 2 || c.Events[0].TimeUnixNano == 0 {
		t.Fatalf("events %v", c.Events)
	}
	if len(c.Links) != 1 || !bytes.Equal(c.Links[0].SpanId, psid[:]) || c.Links[0].Attributes[0].Value.GetStringValue() != "link" {
		t.Fatalf("links %v", c.Links)
	}
	if c.Status.Code != tracepb.Status_STATUS_CODE_ERROR || c.Status.Message != "rate limited" || p.Status.Code != tracepb.Status_STATUS_CODE_OK {
		t.Fatalf("status %v %v", c.Status, p.Status)
	}
	if c.Flags&0x1 == 0 || c.Flags&flagHasIsRemote == 0 || c.Flags&flagIsRemote != 0 {
		t.Fatalf("flags %x", c.Flags)
	}
}

// norm drops the spaces prototext puts at random.
func norm(s string) string { return strings.Join(strings.Fields(s), "") }

// TestRetryAndGiveUp: 503 and 429 are retried (Retry-After honoured), 400
// is not; an export that keeps failing gives up at its timeout.
func TestRetryAndGiveUp(t *testing.T) {
	t.Parallel()
	span := func(tp *tracing.Provider) {
		_, s := tp.Tracer("t", "").Start(context.Background(), "s")
		s.End()
	}
	t.Run("retried", func(t *testing.T) {
		t.Parallel()
		rcv := newReceiver(t, http.StatusServiceUnavailable, http.StatusTooManyRequests)
		exp, _ := New(Config{URL: rcv.URL, Logger: zerolog.Nop()})
		tp, _ := NewTracerProvider(exp, Service{Name: "x"}, func(string) string { return "" })
		span(tp)
		if err := tp.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		if len(rcv.headers) != 3 || len(rcv.spans()) != 1 {
			t.Fatalf("%d requests, %d spans", len(rcv.headers), len(rcv.spans()))
		}
	})
	t.Run("not retried", func(t *testing.T) {
		t.Parallel()
		rcv := newReceiver(t, http.StatusBadRequest)
		exp, _ := New(Config{URL: rcv.URL, Logger: zerolog.Nop()})
		tp, _ := NewTracerProvider(exp, Service{Name: "x"}, func(string) string { return "" })
		span(tp)
		_ = tp.Shutdown(t.Context())
		if len(rcv.headers) != 1 || len(rcv.spans()) != 0 {
			t.Fatalf("%d requests, %d spans", len(rcv.headers), len(rcv.spans()))
		}
	})
	t.Run("gives up", func(t *testing.T) {
		t.Parallel()
		var logs bytes.Buffer
		exp, _ := New(Config{URL: "http://127.0.0.1:1/v1/traces", Timeout: 300 * time.Millisecond, Logger: zerolog.New(&logs)})
		err := exp.ExportSpans(t.Context(), recordSpans(t))
		if err == nil || !strings.Contains(err.Error(), "gave up") || !strings.Contains(logs.String(), "trace export failed") {
			t.Fatalf("err %v, logs %s", err, logs.String())
		}
		_ = exp.Shutdown(t.Context())
		if err := exp.ExportSpans(t.Context(), recordSpans(t)); !errors.Is(err, ErrStopped) {
			t.Fatalf("after shutdown: %v", err)
		}
	})
}

type sdkSpan = tracing.SpanData

// collect is an exporter that keeps what it is handed.
type collect struct {
	mu    sync.Mutex
	spans []sdkSpan
}

func (c *collect) ExportSpans(_ context.Context, s []sdkSpan) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, s...)
	return nil
}

func (c *collect) Shutdown(context.Context) error { return nil }

// recordSpans returns one ended span as the SDK hands it to an exporter.
func recordSpans(t *testing.T) []sdkSpan {
	t.Helper()
	rec := &collect{}
	tp, _ := NewTracerProvider(rec, Service{Name: "x"}, func(string) string { return "" })
	_, s := tp.Tracer("t", "").Start(context.Background(), "s")
	s.End()
	_ = tp.Shutdown(t.Context())
	return rec.spans
}

// TestFromEnv: the standard variables, the traces-specific one winning;
// off without an endpoint; what cannot be honoured is refused.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		env     map[string]string
		on      bool
		url     string
		wantErr string
	}{
		{"off", map[string]string{}, false, "", ""},
		{"base endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, true, "http://c:4318/v1/traces", ""},
		{"traces endpoint as given", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://t/x"}, true, "https://t/x", ""},
		{"disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false, "", ""},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false, "", ""},
		{"grpc refused", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "", "not gRPC"},
		{"zipkin refused", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "zipkin"}, false, "", "OTEL_TRACES_EXPORTER"},
		{"bad timeout", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, false, "", "TIMEOUT"},
		{"bad headers", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, false, "", "key=value"},
		{"not a URL", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"}, false, "", "not an http(s) URL"},
		{"missing CA", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, false, "", "CERTIFICATE"},
	} {
		env, on, err := FromEnv(func(k string) string { return c.env[k] })
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: err %v, want %q", c.name, err, c.wantErr)
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case on != c.on || env.URL != c.url:
			t.Errorf("%s: on %v url %q", c.name, on, env.URL)
		}
	}
	env, _, err := FromEnv(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Basic%20abc,x-other=1",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-honeycomb-team=secret%3Dkey", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
			"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip"}[k]
	})
	if err != nil || env.Headers["x-honeycomb-team"] != "secret=key" || len(env.Headers) != 1 || env.Timeout != 2500*time.Millisecond ||
		!env.Gzip || len(env.Secrets) != 1 || env.Secrets[0] != "secret=key" {
		t.Fatalf("%+v, %v", env, err)
	}
}

// TestTracerProviderEnv: the sampler and batch variables are read, and a
// value the tracer cannot honour fails the start instead of being ignored.
func TestTracerProviderEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env     map[string]string
		wantErr string
	}{
		{map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_BSP_SCHEDULE_DELAY": "100",
			"OTEL_BSP_EXPORT_TIMEOUT": "1000", "OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "5"}, ""},
		{map[string]string{"OTEL_TRACES_SAMPLER": "xray"}, "OTEL_TRACES_SAMPLER"},
		{map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"}, "OTEL_TRACES_SAMPLER_ARG"},
		{map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, "OTEL_BSP_MAX_QUEUE_SIZE"},
		{map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "soon"}, "OTEL_BSP_SCHEDULE_DELAY"},
	} {
		tp, err := NewTracerProvider(&collect{}, Service{Name: "x"}, func(k string) string { return c.env[k] })
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%v: err %v, want %q", c.env, err, c.wantErr)
		}
		if tp != nil {
			_ = tp.Shutdown(t.Context())
		}
	}
}
