package google_test

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
	"github.com/lanefleet/lanefleet/provider/google"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

func model(url, id string) provider.Model {
	return provider.Model{ID: id, Provider: "google", API: "google-generative-ai", BaseURL: url + "/v1beta", Reasoning: true,
		ContextWindow: 1048576, MaxTokens: 65536, Input: []string{"text", "image"},
		Cost: provider.ModelCost{Input: 1.25, Output: 10, CacheRead: 0.31}}
}

func geminiUsage(u *message.Usage) wiretest.Usage { return wiretest.WireUsage(u, true) }

func TestWire(t *testing.T) {
	t.Parallel()
	for _, c := range wiretest.Cases(t, "google-generative-ai") {
		t.Run(c.File, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.Serve(t, c)
			id := "gemini-2.5-flash"
			if c.Model != nil {
				id = *c.Model
			}
			var events []provider.Event
			req := &provider.Request{Model: model(srv.URL, id), Messages: []message.Message{message.User("hi", 1)}, APIKey: "g-secret"}
			msg, err := google.New(google.Config{}).Stream(t.Context(), req, func(e provider.Event) { events = append(events, e) })
			wiretest.Check(t, c, msg, err, geminiUsage)
			checkEvents(t, events, msg)
			r := srv.Last(t)
			if r.Path != "/v1beta/models/"+id+":streamGenerateContent" || r.Query != "alt=sse" || r.Header.Get("X-Goog-Api-Key") != "g-secret" {
				t.Errorf("request %s?%s %v", r.Path, r.Query, r.Header)
			}
			if strings.Contains(c.File, "429") {
				var pe *provider.Error
				if errors.As(err, &pe) && pe.RetryAfter != 26*time.Second {
					t.Errorf("retry after %v", pe.RetryAfter)
				}
			}
			calls := msg.ToolCalls()
			if strings.Contains(c.File, "parallel") && (len(calls) != 2 || calls[0].ThoughtSignature == "" || calls[1].ID == calls[0].ID) {
				t.Errorf("parallel calls %+v", calls)
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
}

func sse(chunks ...string) []byte {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\r\n\r\n")
	}
	return []byte(b.String())
}

func TestRequest(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", sse(`{"candidates":[{"content":{"parts":[{"text":"ok"}],"role":"model"},"finishReason":"STOP"}]}`), 0)
	m := model(srv.URL, "gemini-3-pro-preview")
	same := func(mm message.Message) message.Message {
		mm.Role, mm.API, mm.Provider, mm.Model = message.RoleAssistant, m.API, m.Provider, m.ID
		return mm
	}
	req := &provider.Request{Model: m, SystemPrompt: "sys", Thinking: provider.ThinkingLow, MaxTokens: 900,
		Tools: []provider.Tool{{Name: "read", Description: "r", Parameters: map[string]any{"type": "object"}}},
		Messages: []message.Message{
			message.User("q", 1),
			same(message.Message{StopReason: message.StopToolUse, Content: message.BlocksOf(
				message.Thinking("t", "VFNJRw=="),
				message.Block{Type: message.BlockText, Text: "x", TextSignature: "VFhU"},
				message.Block{Type: message.BlockToolCall, ID: "c1", Name: "read", Arguments: map[string]any{"p": 1}, ThoughtSignature: "Q0FMTA=="})}),
			{Role: message.RoleToolResult, ToolCallID: "c1", ToolName: "read", Content: message.BlocksOf(message.Text("R"), message.Image("image/png", "AAAA"))},
			{Role: message.RoleAssistant, API: "anthropic-messages", Provider: "anthropic", Model: "c", StopReason: message.StopToolUse,
				Content: message.BlocksOf(message.ToolCall("toolu_1", "read", nil))},
			{Role: message.RoleToolResult, ToolCallID: "toolu_1", IsError: true, Content: message.BlocksOf(message.Text("bad"))},
		}}
	msg, err := google.New(google.Config{}).Stream(t.Context(), req, nil)
	if err != nil || msg.Content.Text() != "ok" {
		t.Fatal(err)
	}
	var body struct {
		Contents []struct {
			Role  string
			Parts []map[string]any
		}
		SystemInstruction map[string]any
		Tools             []map[string]any
		GenerationConfig  map[string]any
	}
	raw := srv.Last(t).Body
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	gc := body.GenerationConfig
	if gc["maxOutputTokens"] != float64(900) || gc["thinkingConfig"].(map[string]any)["thinkingLevel"] != "LOW" {
		t.Errorf("generationConfig %v", gc)
	}
	if len(body.Contents) != 5 {
		t.Fatalf("contents: %s", raw)
	}
	mp := body.Contents[1].Parts
	if mp[0]["thought"] != true || mp[0]["thoughtSignature"] != "VFNJRw==" || mp[1]["thoughtSignature"] != "VFhU" || mp[2]["thoughtSignature"] != "Q0FMTA==" {
		t.Errorf("model parts %v", mp)
	}
	fr := body.Contents[2].Parts[0]["functionResponse"].(map[string]any)
	if fr["name"] != "read" || fr["response"].(map[string]any)["output"] != "R" || fr["parts"] == nil || fr["id"] != nil {
		t.Errorf("function response %v", fr)
	}
	if sig := body.Contents[3].Parts[0]["thoughtSignature"]; sig != google.SkipSignature {
		t.Errorf("gemini 3 unsigned call: %v", sig)
	}
	if fr := body.Contents[4].Parts[0]["functionResponse"].(map[string]any); fr["response"].(map[string]any)["error"] != "bad" || fr["name"] != "read" {
		t.Errorf("error response without tool name %v", fr)
	}
	if body.Tools[0]["functionDeclarations"].([]any)[0].(map[string]any)["parametersJsonSchema"] == nil {
		t.Errorf("tools %v", body.Tools)
	}
}

func TestBudgets(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", sse(`{"candidates":[{"content":{"parts":[{"text":"ok"}]},"finishReason":"STOP"}]}`), 0)
	for _, tc := range []struct {
		id    string
		level provider.ThinkingLevel
		want  string
	}{
		{"gemini-2.5-pro", provider.ThinkingHigh, `"thinkingBudget":32768`},
		{"gemini-2.5-flash", provider.ThinkingXHigh, `"thinkingBudget":24576`},
		{"gemini-3-flash-preview", provider.ThinkingMinimal, `"thinkingLevel":"MINIMAL"`},
		{"gemini-2.5-flash", provider.ThinkingOff, `"generationConfig":{"maxOutputTokens":32000}`},
	} {
		if _, err := google.New(google.Config{}).Stream(t.Context(), &provider.Request{Model: model(srv.URL, tc.id), Thinking: tc.level, Messages: []message.Message{message.User("q", 1)}}, nil); err != nil {
			t.Fatal(err)
		}
		if b := string(srv.Last(t).Body); !strings.Contains(b, tc.want) {
			t.Errorf("%s %s: %s", tc.id, tc.level, b)
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
		{name: "thoughts then text with signature and usage", body: sse(
			`{"candidates":[{"content":{"parts":[{"text":"plan","thought":true}],"role":"model"}}]}`,
			`{"candidates":[{"content":{"parts":[{"text":"ning","thought":true,"thoughtSignature":"U0lH"}],"role":"model"}}]}`,
			`{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"}}]}`,
			`{"candidates":[{"content":{"parts":[{"text":"!","thoughtSignature":"VFM="}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":2,"thoughtsTokenCount":5,"cachedContentTokenCount":4,"totalTokenCount":17}}`),
			check: func(t *testing.T, msg message.Message) {
				b := msg.Content.Blocks
				if len(b) != 2 || b[0].Thinking != "planning" || b[0].ThinkingSignature != "U0lH" || b[1].Text != "Hi!" || b[1].TextSignature != "VFM=" {
					t.Errorf("%+v", b)
				}
				if u := msg.Usage; u.Input != 6 || u.CacheRead != 4 || u.Output != 7 || u.TotalTokens != 17 {
					t.Errorf("usage %+v", u)
				}
			}},
		{name: "error chunk", body: sse(`{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`), reason: provider.ReasonOverloaded},
		{name: "safety", body: sse(`{"candidates":[{"finishReason":"SAFETY"}]}`), reason: provider.ReasonUnknown},
		{name: "truncated", body: sse(`{"candidates":[{"content":{"parts":[{"text":"half"}]}}]}`), reason: provider.ReasonTimeout},
		{name: "malformed", body: []byte("data: {nope\r\n\r\n"), reason: provider.ReasonTimeout},
		{name: "unknown event", body: []byte("event: odd\r\ndata: {}\r\n\r\n"), reason: provider.ReasonTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.ServeBody(t, 200, "text/event-stream", tc.body, 13)
			msg, err := google.New(google.Config{}).Stream(t.Context(), &provider.Request{Model: model(srv.URL, "gemini-2.5-pro")}, nil)
			wiretest.Outcome(t, msg, err, tc.reason, tc.check)
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		body   string
		reason provider.Reason
	}{
		{400, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}`, provider.ReasonAuthPermanent},
		{403, `{"error":{"code":403,"message":"Permission denied","status":"PERMISSION_DENIED"}}`, provider.ReasonAuth},
		{500, `{"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}`, provider.ReasonTimeout},
		{503, `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`, provider.ReasonOverloaded},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			srv := wiretest.New(t, func(w http.ResponseWriter, r *http.Request) {
				wiretest.Reply(w, tc.status, map[string]string{"Content-Type": "application/json"}, []byte(tc.body), 0)
			})
			_, err := google.New(google.Config{}).Stream(t.Context(), &provider.Request{Model: model(srv.URL, "gemini-2.5-pro"), APIKey: "g-secret"}, nil)
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Reason != tc.reason || pe.Status != tc.status || strings.Contains(err.Error(), "g-secret") {
				t.Errorf("got %+v", err)
			}
		})
	}
}

func TestBrokenConnections(t *testing.T) {
	t.Parallel()
	prefix := sse(`{"candidates":[{"content":{"parts":[{"text":"partial"}]}}]}`)
	wiretest.Broken(t, prefix, "partial", func(ctx context.Context, url string, idle time.Duration, emit func(provider.Event)) (message.Message, error) {
		return google.New(google.Config{IdleTimeout: idle}).Stream(ctx, &provider.Request{Model: model(url, "x")}, emit)
	})
}

func BenchmarkStream(b *testing.B) {
	var sb strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&sb, "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"word%d \"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 65,\"totalTokenCount\": 65,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 65}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"yACzaZiFOp3Uz7IP577z4Qk\"}\r\n\r\n", i)
	}
	sb.WriteString("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 65,\"candidatesTokenCount\": 2000,\"totalTokenCount\": 2065}}\r\n\r\n")
	body := []byte(sb.String())
	wiretest.Bench(b, body, func(url string) (provider.Provider, *provider.Request) {
		return google.New(google.Config{}), &provider.Request{Model: model(url, "gemini-2.5-flash"), Messages: []message.Message{message.User("hi", 1)}}
	})
}

// TestConnections: calls through one adapter reuse their connections.
func TestConnections(t *testing.T) {
	t.Parallel()
	body := wiretest.Body(t, "google-generative-ai-parallel-function-calls.sse")
	a := google.New(google.Config{})
	wiretest.Reuse(t, body, func(ctx context.Context, url string) (message.Message, error) {
		return a.Stream(ctx, &provider.Request{Model: model(url, "gemini-2.5-flash"), Messages: []message.Message{message.User("hi", 1)}, APIKey: "k"}, nil)
	})
}

// TestURLAndHeaders: the API version is added to a base URL without one,
// the model id is escaped into one path segment, the key goes in
// x-goog-api-key and configured headers come on top.
func TestURLAndHeaders(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, http.StatusOK, "text/event-stream", sse(`{"candidates":[{"content":{"parts":[{"text":"ok"}]},"finishReason":"STOP"}]}`), 0)
	for _, tc := range []struct {
		name, base, id, key string
		headers             map[string]string
		path                string
		want                map[string]string // "" = absent
	}{
		{"default version", srv.URL, "gemini-2.5-flash", "g", nil, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", map[string]string{
			"X-Goog-Api-Key": "g", "Content-Type": "application/json", "Accept": "text/event-stream"}},
		{"own version", srv.URL + "/v1/", "gemini-2.5-flash", "", nil, "/v1/models/gemini-2.5-flash:streamGenerateContent", map[string]string{"X-Goog-Api-Key": ""}},
		{"proxy path", srv.URL + "/proxy/google", "gemini-2.5-flash", "g", nil, "/proxy/google/v1beta/models/gemini-2.5-flash:streamGenerateContent", nil},
		{"escaped id", srv.URL + "/v1alpha", "tuned/a b", "g", nil, "/v1alpha/models/tuned%2Fa%20b:streamGenerateContent", nil},
		{"configured", srv.URL, "gemini-2.5-flash", "g", map[string]string{"x-goog-api-key": "other", "X-Extra": "1"}, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", map[string]string{
			"X-Goog-Api-Key": "other", "X-Extra": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := model(srv.URL, tc.id)
			m.BaseURL = tc.base
			_, err := google.New(google.Config{Headers: tc.headers}).Stream(t.Context(), &provider.Request{Model: m, Messages: []message.Message{message.User("hi", 1)}, APIKey: provider.Secret(tc.key)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := srv.Last(t)
			if got.Method != "POST" || got.RawPath != tc.path || got.Query != "alt=sse" {
				t.Errorf("%s %s?%s", got.Method, got.RawPath, got.Query)
			}
			for k, v := range tc.want {
				if h := got.Header.Get(k); h != v {
					t.Errorf("%s = %q, want %q", k, h, v)
				}
			}
		})
	}
}
