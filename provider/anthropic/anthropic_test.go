package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/anthropic"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

func model(url, id string) provider.Model {
	return provider.Model{ID: id, Provider: "anthropic", API: "anthropic-messages", BaseURL: url,
		ContextWindow: 200000, MaxTokens: 64000, Reasoning: true, Input: []string{"text", "image"},
		Cost: provider.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}}
}

func anthropicUsage(u *message.Usage) wiretest.Usage { return wiretest.WireUsage(u, false) }

// TestWire replays every recorded Messages body.
func TestWire(t *testing.T) {
	t.Parallel()
	for _, c := range wiretest.Cases(t, "anthropic-messages") {
		t.Run(c.File, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.Serve(t, c)
			var events []provider.Event
			req := &provider.Request{Model: model(srv.URL, "claude-sonnet-4-5"), Messages: []message.Message{message.User("hi", 1)}, APIKey: "sk-ant-secret"}
			msg, err := anthropic.New(anthropic.Config{}).Stream(t.Context(), req, func(e provider.Event) { events = append(events, e) })
			wiretest.Check(t, c, msg, err, anthropicUsage)
			checkEvents(t, events, msg)
			r := srv.Last(t)
			if r.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != "sk-ant-secret" || r.Header.Get("Anthropic-Version") == "" {
				t.Errorf("request %s %v", r.Path, r.Header)
			}
			if err != nil && strings.Contains(err.Error(), "sk-ant-secret") {
				t.Error("key leaked")
			}
			if c.Headers["retry-after"] == "23" {
				var pe *provider.Error
				if errors.As(err, &pe) && pe.RetryAfter != 23*time.Second {
					t.Errorf("retry after %v", pe.RetryAfter)
				}
			}
		})
	}
}

func checkEvents(t *testing.T, events []provider.Event, msg message.Message) {
	t.Helper()
	if len(events) < 2 || events[0].Type != provider.EventStart {
		t.Fatalf("events must start with start: %d", len(events))
	}
	last := events[len(events)-1]
	if (last.Type != provider.EventDone && last.Type != provider.EventError) || last.Message == nil || last.Reason != msg.StopReason {
		t.Errorf("terminal event %+v", last)
	}
	deltas := map[int]string{}
	for _, e := range events[1 : len(events)-1] {
		switch e.Type {
		case provider.EventTextDelta, provider.EventThinkingDelta:
			deltas[e.ContentIndex] += e.Delta
		case provider.EventTextEnd, provider.EventThinkingEnd:
			if deltas[e.ContentIndex] != e.Content {
				t.Errorf("block %d: deltas %q != %q", e.ContentIndex, deltas[e.ContentIndex], e.Content)
			}
		case provider.EventToolCallEnd:
			if e.ToolCall == nil || e.ToolCall.Arguments == nil {
				t.Errorf("toolcall_end without call")
			}
		case provider.EventDone, provider.EventError, provider.EventStart:
			t.Errorf("%s in the middle", e.Type)
		}
	}
}

func sse(events ...string) []byte {
	var b strings.Builder
	for _, e := range events {
		var h struct{ Type string }
		_ = json.Unmarshal([]byte(e), &h)
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", h.Type, e)
	}
	return []byte(b.String())
}

const (
	msgStart = `{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,"output_tokens":1}}}`
	msgStop  = `{"type":"message_stop"}`
)

func TestRequest(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", sse(msgStart,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}`, msgStop), 0)
	m := model(srv.URL, "claude-sonnet-4-5")
	temp := 0.2
	same := func(mm message.Message) message.Message {
		mm.Role, mm.API, mm.Provider, mm.Model = message.RoleAssistant, m.API, m.Provider, m.ID
		return mm
	}
	req := &provider.Request{
		Model: m, SystemPrompt: "sys", Thinking: provider.ThinkingMedium, Temperature: &temp, MaxTokens: 4000, APIKey: "k",
		Tools: []provider.Tool{{Name: "read", Description: "r", Parameters: map[string]any{"type": "object"}}},
		Messages: []message.Message{
			{Role: message.RoleUser, Content: message.BlocksOf(message.Text("look"), message.Image("image/png", "AAAA"))},
			same(message.Message{StopReason: message.StopToolUse, Content: message.BlocksOf(
				message.Thinking("deep", "SIG=="),
				message.Block{Type: message.BlockThinking, Thinking: "[Reasoning redacted]", ThinkingSignature: "ENC", Redacted: true},
				message.Thinking("unsigned", ""),
				message.ToolCall("toolu_1", "read", map[string]any{"p": "a"}),
				message.ToolCall("toolu_2", "read", map[string]any{"p": "b"}))}),
			{Role: message.RoleToolResult, ToolCallID: "toolu_1", Content: message.BlocksOf(message.Text("A"), message.Text("A2"))},
			{Role: message.RoleToolResult, ToolCallID: "toolu_2", IsError: true, Content: message.BlocksOf(message.Image("image/png", "BBBB"))},
			{Role: message.RoleAssistant, API: "openai-responses", Provider: "openai", Model: "gpt-5", StopReason: message.StopToolUse,
				Content: message.BlocksOf(message.Thinking("theirs", "{}"), message.ToolCall("call_9|fc_9", "read", nil))},
			{Role: message.RoleToolResult, ToolCallID: "call_9|fc_9", Content: message.BlocksOf(message.Text("C"))},
			message.User("go on", 3),
		},
	}
	msg, err := anthropic.New(anthropic.Config{}).Stream(t.Context(), req, nil)
	if err != nil || msg.Content.Text() != "ok" {
		t.Fatalf("%v %+v", err, msg)
	}
	u := msg.Usage
	if u.Input != 10 || u.Output != 7 || u.CacheRead != 100 || u.CacheWrite != 20 || u.TotalTokens != 137 {
		t.Errorf("usage %+v", u)
	}
	r := srv.Last(t)
	if beta := r.Header.Get("Anthropic-Beta"); !strings.Contains(beta, "interleaved-thinking") || !strings.Contains(beta, "fine-grained-tool-streaming") {
		t.Errorf("beta %q", beta)
	}
	var body struct {
		Model       string
		MaxTokens   int `json:"max_tokens"`
		Stream      bool
		Temperature *float64
		Thinking    map[string]any
		System      []map[string]any
		Tools       []map[string]any
		Messages    []struct {
			Role    string
			Content []map[string]any
		}
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.MaxTokens != 4000+8192 || !body.Stream || body.Temperature != nil || body.Thinking["budget_tokens"] != float64(8192) {
		t.Errorf("params: %s", r.Body)
	}
	if body.System[0]["text"] != "sys" || body.System[0]["cache_control"] == nil || body.Tools[0]["input_schema"] == nil {
		t.Errorf("system/tools: %s", r.Body)
	}
	roles := []string{}
	for _, m := range body.Messages {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "user,assistant,user,assistant,user,user" {
		t.Fatalf("roles %s: %s", got, r.Body)
	}
	if img := body.Messages[0].Content[1]; img["type"] != "image" || img["source"].(map[string]any)["data"] != "AAAA" {
		t.Errorf("image %v", img)
	}
	a := body.Messages[1].Content
	if a[0]["type"] != "thinking" || a[0]["signature"] != "SIG==" || a[1]["type"] != "redacted_thinking" || a[1]["data"] != "ENC" ||
		a[2]["type"] != "text" || a[2]["text"] != "unsigned" || a[3]["type"] != "tool_use" || a[3]["id"] != "toolu_1" {
		t.Errorf("assistant blocks %v", a)
	}
	res := body.Messages[2].Content
	if len(res) != 2 || res[0]["tool_use_id"] != "toolu_1" || res[0]["content"] != "A\nA2" || res[1]["is_error"] != true {
		t.Errorf("tool results %v", res)
	}
	if c, ok := res[1]["content"].([]any); !ok || len(c) != 2 {
		t.Errorf("image result %v", res[1]["content"])
	}
	o := body.Messages[3].Content
	if o[0]["type"] != "text" || o[0]["text"] != "theirs" || o[1]["id"] != "call_9_fc_9" {
		t.Errorf("other model blocks %v", o)
	}
	if body.Messages[4].Content[0]["tool_use_id"] != "call_9_fc_9" {
		t.Errorf("remapped result %v", body.Messages[4].Content)
	}
	last := body.Messages[5].Content
	if last[len(last)-1]["cache_control"] == nil {
		t.Errorf("no cache breakpoint on the last user message")
	}
}

func TestAdaptiveThinking(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", sse(msgStart, `{"type":"message_delta","delta":{"stop_reason":"end_turn"}}`, msgStop), 0)
	for _, tc := range []struct {
		id     string
		level  provider.ThinkingLevel
		effort string
	}{{"claude-opus-4-6", provider.ThinkingXHigh, "max"}, {"claude-sonnet-4-6", provider.ThinkingXHigh, "high"}, {"claude-sonnet-4-6", provider.ThinkingMinimal, "low"}} {
		_, err := anthropic.New(anthropic.Config{}).Stream(t.Context(), &provider.Request{Model: model(srv.URL, tc.id), Thinking: tc.level, Messages: []message.Message{message.User("q", 1)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Thinking     map[string]any
			OutputConfig map[string]any `json:"output_config"`
		}
		r := srv.Last(t)
		_ = json.Unmarshal(r.Body, &body)
		if body.Thinking["type"] != "adaptive" || body.OutputConfig["effort"] != tc.effort || strings.Contains(r.Header.Get("Anthropic-Beta"), "interleaved") {
			t.Errorf("%s %s: %s", tc.id, tc.level, r.Body)
		}
	}
}

func TestStreams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		body   []byte
		reason provider.Reason
		check  func(t *testing.T, msg message.Message)
	}{
		{name: "redacted thinking, text and parallel tool calls split across deltas", body: sse(msgStart,
			`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"ENCRYPTED"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_a","name":"read","input":{}}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"pa"}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"th\":\"x\"}"}}`,
			`{"type":"content_block_stop","index":1}`,
			`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_b","name":"ls","input":{}}}`,
			`{"type":"content_block_stop","index":2}`,
			`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}`, msgStop),
			check: func(t *testing.T, msg message.Message) {
				b := msg.Content.Blocks
				if len(b) != 3 || !b[0].Redacted || b[0].ThinkingSignature != "ENCRYPTED" || b[1].Arguments["path"] != "x" ||
					b[2].ID != "toolu_b" || len(b[2].Arguments) != 0 || msg.StopReason != message.StopToolUse {
					t.Errorf("%+v", msg)
				}
			}},
		{name: "malformed", body: []byte("event: message_start\ndata: {oops\n\n"), reason: provider.ReasonTimeout},
		{name: "truncated", body: sse(msgStart, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"half"}}`), reason: provider.ReasonTimeout,
			check: func(t *testing.T, msg message.Message) {
				if msg.Content.Text() != "half" {
					t.Errorf("partial text lost")
				}
			}},
		{name: "unknown event", body: sse(msgStart, `{"type":"surprise"}`), reason: provider.ReasonTimeout},
		{name: "rate limit error event", body: []byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow down\"}}\n\n"), reason: provider.ReasonRateLimit},
		{name: "refusal", body: sse(msgStart, `{"type":"message_delta","delta":{"stop_reason":"refusal"}}`, msgStop), reason: provider.ReasonUnknown},
		{name: "context window stop", body: sse(msgStart, `{"type":"message_delta","delta":{"stop_reason":"model_context_window_exceeded"}}`, msgStop), reason: provider.ReasonContextOverflow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.ServeBody(t, 200, "text/event-stream", tc.body, 11)
			msg, err := anthropic.New(anthropic.Config{}).Stream(t.Context(), &provider.Request{Model: model(srv.URL, "claude-haiku-4-5")}, nil)
			wiretest.Outcome(t, msg, err, tc.reason, tc.check)
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status  int
		headers map[string]string
		body    string
		reason  provider.Reason
		retry   time.Duration
	}{
		{400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208423 tokens > 200000 maximum"}}`, provider.ReasonContextOverflow, 0},
		{403, nil, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, provider.ReasonAuth, 0},
		{429, map[string]string{"retry-after": "12"}, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, provider.ReasonRateLimit, 12 * time.Second},
		{503, nil, `upstream connect error or disconnect/reset before headers`, provider.ReasonTimeout, 0},
		{529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, provider.ReasonOverloaded, 0},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			h := map[string]string{"Content-Type": "application/json"}
			for k, v := range tc.headers {
				h[k] = v
			}
			srv := wiretest.New(t, func(w http.ResponseWriter, r *http.Request) { wiretest.Reply(w, tc.status, h, []byte(tc.body), 0) })
			_, err := anthropic.New(anthropic.Config{}).Stream(t.Context(), &provider.Request{Model: model(srv.URL, "claude-haiku-4-5"), APIKey: "k"}, nil)
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Reason != tc.reason || pe.Status != tc.status || pe.RetryAfter != tc.retry {
				t.Errorf("got %+v", err)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests: SDK retries must be off", n)
			}
		})
	}
}

func TestBrokenConnections(t *testing.T) {
	t.Parallel()
	prefix := sse(msgStart, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"partial"}}`)
	wiretest.Broken(t, prefix, "partial", func(ctx context.Context, url string, idle time.Duration, emit func(provider.Event)) (message.Message, error) {
		return anthropic.New(anthropic.Config{IdleTimeout: idle}).Stream(ctx, &provider.Request{Model: model(url, "x")}, emit)
	})
}

// TestConnections: calls through one adapter reuse their connections,
// though the adapter stops reading at message_stop; a server that keeps the
// stream open after it does not hold up the reply.
func TestConnections(t *testing.T) {
	t.Parallel()
	body := wiretest.Body(t, "anthropic-messages-thinking-tool-use.sse")
	a := anthropic.New(anthropic.Config{})
	call := func(ctx context.Context, url string) (message.Message, error) {
		return a.Stream(ctx, &provider.Request{Model: model(url, "claude-sonnet-4-5"), Messages: []message.Message{message.User("hi", 1)}, APIKey: "k"}, nil)
	}
	t.Run("reuse", func(t *testing.T) { t.Parallel(); wiretest.Reuse(t, body, call) })
	t.Run("held", func(t *testing.T) { t.Parallel(); wiretest.Held(t, body, call) })
}

// TestHeaders pins what the SDK used to send for us: the key as x-api-key,
// an OAuth token as a bearer with the oauth beta, the API version, the
// betas, configured headers on top; and the base URL joined as the SDK
// joined it.
func TestHeaders(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", sse(msgStart, `{"type":"message_delta","delta":{"stop_reason":"end_turn"}}`, msgStop), 0)
	for _, tc := range []struct {
		name, base, key string
		headers         map[string]string
		path            string
		want            map[string]string // "" = absent
	}{
		{"api key", srv.URL, "sk-ant-api03-k", nil, "/v1/messages", map[string]string{
			"X-Api-Key": "sk-ant-api03-k", "Authorization": "", "Anthropic-Version": anthropic.APIVersion,
			"Anthropic-Beta": "fine-grained-tool-streaming-2025-05-14", "Content-Type": "application/json", "Accept": "text/event-stream"}},
		{"oauth", srv.URL + "/", "sk-ant-oat01-k", nil, "/v1/messages", map[string]string{
			"X-Api-Key": "", "Authorization": "Bearer sk-ant-oat01-k", "Anthropic-Beta": "fine-grained-tool-streaming-2025-05-14,oauth-2025-04-20"}},
		{"no key", srv.URL + "/proxy/anthropic", "", nil, "/proxy/anthropic/v1/messages", map[string]string{
			"X-Api-Key": "", "Authorization": "", "Anthropic-Version": anthropic.APIVersion}},
		{"configured", srv.URL, "k", map[string]string{"anthropic-beta": "mine", "User-Agent": "ua", "X-Extra": "1"}, "/v1/messages", map[string]string{
			"X-Api-Key": "k", "Anthropic-Beta": "mine", "User-Agent": "ua", "X-Extra": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := anthropic.New(anthropic.Config{Headers: tc.headers})
			req := &provider.Request{Model: model(tc.base, "claude-sonnet-4-5"), Messages: []message.Message{message.User("hi", 1)}, APIKey: provider.Secret(tc.key)}
			if _, err := a.Stream(t.Context(), req, nil); err != nil {
				t.Fatal(err)
			}
			r := srv.Last(t)
			if r.Method != "POST" || r.Path != tc.path {
				t.Errorf("%s %s", r.Method, r.Path)
			}
			for k, v := range tc.want {
				if got := r.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestBadBaseURL: a base URL that is not absolute http(s) fails as a
// format error before anything is sent.
func TestBadBaseURL(t *testing.T) {
	t.Parallel()
	msg, err := anthropic.New(anthropic.Config{}).Stream(t.Context(), &provider.Request{Model: model("api.anthropic.com", "claude-sonnet-4-5")}, nil)
	if provider.ReasonOf(err) != provider.ReasonFormat || !strings.Contains(msg.ErrorMessage, "base URL") {
		t.Errorf("%v %q", err, msg.ErrorMessage)
	}
}
