package integration

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/tracing"
	"github.com/lanefleet/lanefleet/tracing/otlp"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver decoding requests
// with the protocol's generated types.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		data, _ := io.ReadAll(req.Body)
		var m coltrace.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(data, &m) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range m.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) all() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// TestObservedFleet runs turns on a member with metrics and tracing on and
// checks what an operator sees: the counters move as the turns say, a
// client's trace continues through the lane into the turn, its attempt,
// the model calls and the tool call (parent by parent, with the GenAI
// attributes), one log line per run end names the session by fingerprint
// only, and no label or line holds the session key.
func TestObservedFleet(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	rcv := newOTLPReceiver(t)
	exp, err := otlp.New(otlp.Config{URL: rcv.URL + "/v1/traces", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := otlp.NewTracerProvider(exp, otlp.Service{Name: "lanefleet-worker", Instance: "obs"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	logs := &syncBuffer{}
	m, err := fleet.Start(t.Context(), fleet.Config{NATSURL: srv.URL, WorkerID: "obs", Scripted: true, WorkspaceRoot: t.TempDir(),
		MetricsListen: "127.0.0.1:0", TracerProvider: tp, Logger: zerolog.New(logs).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + m.MetricsAddr()

	cl, err := lanefleet.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const session = "secret-session-key-4242"
	// The caller's own tracing: a span around its send.
	clientTP, err := tracing.NewProvider(tracing.ProviderConfig{Exporter: discardSpans{}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = clientTP.Shutdown(context.Background()) }()
	cctx, clientSpan := clientTP.Tracer("caller", "").Start(t.Context(), "ask the agent")
	send := func(ctx context.Context, text string, opts ...lanefleet.SendOption) *events.Result {
		t.Helper()
		r, err := cl.Send(ctx, session, text, opts...)
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Wait(ctx)
		var re *lanefleet.RunError
		if err != nil && !errorsAs(err, &re) {
			t.Fatal(err)
		}
		return res
	}
	script := lanefleet.WithModel("scripted/script")
	send(t.Context(), "hello") // scripted/echo, the default
	send(cctx, `#script {"replies":[{"toolCalls":[{"id":"w1","name":"write","arguments":{"path":"notes.md","content":"hi"}}]},{"text":"Done."}]}`, script)
	clientSpan.End()
	send(t.Context(), `#script {"replies":[{"error":{"status":400,"message":"unknown parameter: frobnicate"}}]}`, script)

	// A raw publish to a subject that cannot be a lane is a dead letter,
	// counted by reason.
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("agent.in.a.b", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		if n, _ := series(get(t, base+"/metrics"), `lanefleet_dead_letters_total{reason="bad-lane"}`); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no bad-lane dead letter counted")
		}
		time.Sleep(20 * time.Millisecond) // polling the scrape, not timing it
	}

	// Metrics: three turns (two answered, one error), three model calls
	// that succeeded (one echo, two script) and one refused, one write.
	body := get(t, base+"/metrics")
	const present, moved = -1, -2
	for _, c := range []struct {
		series string
		want   float64
	}{
		{`lanefleet_turns_total{outcome="ok"}`, 2},
		{`lanefleet_turns_total{outcome="error"}`, 1},
		{`lanefleet_turn_duration_seconds_count`, 3},
		{`lanefleet_queue_wait_seconds_count{tenant="none"}`, 3},
		{`lanefleet_provider_requests_total{model="script",outcome="ok",provider="scripted"}`, 2},
		{`lanefleet_provider_requests_total{model="echo",outcome="ok",provider="scripted"}`, 1},
		{`lanefleet_tool_calls_total{outcome="ok",tool="write"}`, 1},
		{`lanefleet_lanes_active`, present},
		{`lanefleet_inbound_backlog_messages`, present},
		{`lanefleet_first_event_seconds_count`, moved},
		{`lanefleet_tokens_total{kind="input",model="script",provider="scripted"}`, moved},
		{`lanefleet_tokens_total{kind="output",model="script",provider="scripted"}`, moved},
	} {
		got, ok := series(body, c.series)
		switch {
		case !ok:
			t.Errorf("/metrics has no %s", c.series)
		case c.want >= 0 && got != c.want:
			t.Errorf("%s = %v, want %v", c.series, got, c.want)
		case c.want == moved && got <= 0:
			t.Errorf("%s = %v, want it to have moved", c.series, got)
		}
	}
	// The refused call is counted under its failover reason, not ok.
	if refused := grepLines(body, `lanefleet_provider_requests_total{model="script",outcome=`); strings.Count(refused, "\n") != 1 {
		t.Errorf("the refused model call is not counted apart:\n%s", refused)
	}
	if !strings.Contains(body, "lanefleet_build_info{") {
		t.Error("/metrics has no lanefleet_build_info")
	}
	if strings.Contains(body, session) {
		t.Error("a metric label holds the session key")
	}
	if got := get(t, base+"/healthz"); !strings.Contains(got, "ok") {
		t.Errorf("/healthz: %q", got)
	}
	if got := get(t, base+"/readyz"); !strings.Contains(got, "ready") {
		t.Errorf("/readyz: %q", got)
	}

	// Traces: the caller's span is the parent of the turn's, the turn's of
	// its attempt, and the attempt's of its model calls and tool call.
	if err := tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := clientSpan.SpanContext()
	var turn, attempt *tracepb.Span
	var chats, tools []*tracepb.Span
	spans := rcv.all()
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) != want.TraceID.String() {
			continue
		}
		switch {
		case s.Name == "invoke_agent lanefleet":
			turn = s
		case strings.HasPrefix(s.Name, "attempt "):
			attempt = s
		case strings.HasPrefix(s.Name, "chat "):
			chats = append(chats, s)
		case strings.HasPrefix(s.Name, "execute_tool "):
			tools = append(tools, s)
		}
	}
	if turn == nil || attempt == nil || len(chats) != 2 || len(tools) != 1 {
		t.Fatalf("spans of the caller's trace: turn %v, attempt %v, %d chats, %d tools (of %d spans)", turn != nil, attempt != nil, len(chats), len(tools), len(spans))
	}
	if hex.EncodeToString(turn.ParentSpanId) != want.SpanID.String() {
		t.Errorf("turn's parent %x, want the caller's span %s", turn.ParentSpanId, want.SpanID)
	}
	if string(attempt.ParentSpanId) != string(turn.SpanId) {
		t.Error("the attempt is not the turn's child")
	}
	for _, s := range append(chats, tools...) {
		if string(s.ParentSpanId) != string(attempt.SpanId) {
			t.Errorf("%s is not the attempt's child", s.Name)
		}
	}
	chat := attrs(chats[0])
	for k, v := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted", "gen_ai.request.model": "script"} {
		if chat[k] != v {
			t.Errorf("chat span %s = %q, want %q", k, chat[k], v)
		}
	}
	if chat["gen_ai.usage.input_tokens"] == "" || chat["gen_ai.response.finish_reasons"] == "" {
		t.Errorf("chat span lacks usage or finish reason: %v", chat)
	}
	if tool := attrs(tools[0]); tool["gen_ai.tool.name"] != "write" || tool["gen_ai.tool.call.id"] != "w1" {
		t.Errorf("tool span: %v", tool)
	}
	if a := attrs(turn); a["lanefleet.session.fingerprint"] != events.Fingerprint(session) {
		t.Errorf("turn span names the session %q", a["lanefleet.session.fingerprint"])
	}

	// Logs: one line per run end, the session by fingerprint.
	var ends []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["message"] == "run ended" {
			ends = append(ends, line)
		}
	}
	if len(ends) != 3 {
		t.Fatalf("%d run-end lines, want 3:\n%s", len(ends), logs.String())
	}
	for _, k := range []string{"session", "run_id", "model", "outcome", "duration_ms", "queue_wait_ms", "tokens"} {
		if _, ok := ends[1][k]; !ok {
			t.Errorf("run-end line lacks %s: %v", k, ends[1])
		}
	}
	if ends[1]["session"] != events.Fingerprint(session) || ends[2]["outcome"] != "error" || ends[1]["model"] != "scripted/script" {
		t.Errorf("run-end lines: %v", ends)
	}
	if strings.Contains(logs.String(), session) {
		t.Error("a log line holds the session key")
	}
}

// discardSpans is a caller's exporter that drops what it is handed.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []tracing.SpanData) error { return nil }
func (discardSpans) Shutdown(context.Context) error                        { return nil }

func errorsAs(err error, target **lanefleet.RunError) bool {
	for e := err; e != nil; {
		if re, ok := e.(*lanefleet.RunError); ok {
			*target = re
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

func get(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// series returns the value of one series of a text exposition.
func series(body, name string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

func grepLines(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func attrs(s *tracepb.Span) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes {
		v := kv.Value
		switch {
		case v.GetStringValue() != "":
			out[kv.Key] = v.GetStringValue()
		case v.GetArrayValue() != nil:
			out[kv.Key] = v.String()
		default:
			out[kv.Key] = strconv.FormatInt(v.GetIntValue(), 10)
		}
	}
	return out
}
