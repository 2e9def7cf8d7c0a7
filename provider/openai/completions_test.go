package openai_test

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
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/provider/openai"
)

func chatModel(url, prov, id string) provider.Model {
	return provider.Model{ID: id, Provider: prov, API: "openai-completions", BaseURL: url + "/v1",
		ContextWindow: 128000, MaxTokens: 16384, Input: []string{"text", "image"},
		Cost: provider.ModelCost{Input: 1, Output: 2, CacheRead: 0.5}}
}

func completionsUsage(u *message.Usage) wiretest.Usage { return wiretest.WireUsage(u, true) }

// TestCompletionsWire replays every recorded Chat Completions body.
func TestCompletionsWire(t *testing.T) {
	t.Parallel()
	for _, c := range wiretest.Cases(t, "openai-completions", "openai-compatible") {
		t.Run(c.File, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.Serve(t, c)
			prov := "openai"
			if c.API == "openai-compatible" {
				prov = strings.Split(strings.TrimPrefix(c.File, "openai-compatible-"), "-")[0]
			}
			id := "gpt-4o-mini"
			if c.Model != nil {
				id = *c.Model
			}
			var events []provider.Event
			req := &provider.Request{Model: chatModel(srv.URL, prov, id), Messages: []message.Message{message.User("hi", 1)}, APIKey: "sk-test-secret"}
			msg, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), req, func(e provider.Event) { events = append(events, e) })
			wiretest.Check(t, c, msg, err, completionsUsage)
			checkEvents(t, events, msg)
			r := srv.Last(t)
			if r.Path != "/v1/chat/completions" {
				t.Errorf("path %s", r.Path)
			}
			if got := r.Header.Get("Authorization"); got != "Bearer sk-test-secret" {
				t.Errorf("authorization %q", got)
			}
			if err != nil && strings.Contains(err.Error(), "sk-test-secret") {
				t.Errorf("key leaked into error: %v", err)
			}
		})
	}
}

// checkEvents checks the event protocol: start first, one terminal event
// last carrying the message, deltas adding up to each block.
func checkEvents(t *testing.T, events []provider.Event, msg message.Message) {
	t.Helper()
	if len(events) < 2 || events[0].Type != provider.EventStart {
		t.Fatalf("events must start with start: %+v", events)
	}
	last := events[len(events)-1]
	if last.Type != provider.EventDone && last.Type != provider.EventError {
		t.Fatalf("last event %s", last.Type)
	}
	if last.Message == nil || last.Reason != msg.StopReason {
		t.Errorf("terminal event %+v", last)
	}
	deltas := map[int]string{}
	for _, e := range events[1 : len(events)-1] {
		switch e.Type {
		case provider.EventTextDelta, provider.EventThinkingDelta:
			deltas[e.ContentIndex] += e.Delta
		case provider.EventTextEnd, provider.EventThinkingEnd:
			if deltas[e.ContentIndex] != e.Content {
				t.Errorf("block %d: deltas %q != end content %q", e.ContentIndex, deltas[e.ContentIndex], e.Content)
			}
		case provider.EventDone, provider.EventError, provider.EventStart:
			t.Errorf("%s in the middle", e.Type)
		}
	}
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("request body: %v\n%s", err, b)
	}
	return m
}

func sse(chunks ...string) []byte {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	return []byte(b.String())
}

// TestCompletionsRequest checks the body sent for a conversation with a
// system prompt, images, thinking, tool calls and results.
func TestCompletionsRequest(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", sse(`{"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}`, "[DONE]"), 0)
	m := chatModel(srv.URL, "openai", "gpt-5-mini")
	m.Reasoning = true
	temp := 0.5
	req := &provider.Request{
		Model: m, SystemPrompt: "be brief", Thinking: provider.ThinkingXHigh, Temperature: &temp, MaxTokens: 1000,
		APIKey: "k",
		Tools:  []provider.Tool{{Name: "read", Description: "read a file", Parameters: map[string]any{"type": "object"}}},
		Messages: []message.Message{
			{Role: message.RoleUser, Content: message.BlocksOf(message.Text("look"), message.Image("image/png", "AAAA"))},
			{Role: message.RoleAssistant, API: "anthropic-messages", Provider: "anthropic", Model: "claude", StopReason: message.StopToolUse,
				Content: message.BlocksOf(message.Thinking("hmm", "sig"), message.Text("reading"),
					message.ToolCall("toolu_01|weird", "read", map[string]any{"path": "a.go"}))},
			{Role: message.RoleToolResult, ToolCallID: "toolu_01|weird", ToolName: "read", Content: message.BlocksOf(message.Image("image/png", "BBBB"))},
			{Role: message.RoleAssistant, API: "openai-completions", Provider: "openai", Model: "gpt-5-mini", StopReason: message.StopError, ErrorMessage: "x"},
			message.User("next", 2),
		},
	}
	msg, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), req, nil)
	if err != nil || msg.Content.Text() != "ok" {
		t.Fatalf("%v %+v", err, msg)
	}
	body := decode(t, srv.Last(t).Body)
	want := map[string]any{
		"model": "gpt-5-mini", "stream": true, "store": false, "max_completion_tokens": float64(1000),
		"temperature": 0.5, "reasoning_effort": "high", "stream_options": map[string]any{"include_usage": true},
	}
	for k, v := range want {
		if fmt.Sprint(body[k]) != fmt.Sprint(v) {
			t.Errorf("%s = %v, want %v", k, body[k], v)
		}
	}
	msgs := body["messages"].([]any)
	roles := []string{}
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if got := strings.Join(roles, ","); got != "developer,user,assistant,tool,user,user" {
		t.Fatalf("roles %s\n%s", got, srv.Last(t).Body)
	}
	asst := msgs[2].(map[string]any)
	if asst["content"] != "hmmreading" {
		t.Errorf("assistant content %v (other model's thinking becomes text)", asst["content"])
	}
	call := asst["tool_calls"].([]any)[0].(map[string]any)
	if call["id"] != "toolu_01" || call["function"].(map[string]any)["arguments"] != `{"path":"a.go"}` {
		t.Errorf("tool call %v", call)
	}
	tool := msgs[3].(map[string]any)
	if tool["tool_call_id"] != "toolu_01" || tool["content"] != "(see attached image)" {
		t.Errorf("tool result %v", tool)
	}
	img := msgs[4].(map[string]any)["content"].([]any)
	if len(img) != 2 || img[1].(map[string]any)["image_url"].(map[string]any)["url"] != "data:image/png;base64,BBBB" {
		t.Errorf("tool image %v", img)
	}
	tools := body["tools"].([]any)
	if fn := tools[0].(map[string]any)["function"].(map[string]any); fn["name"] != "read" || fn["strict"] != false {
		t.Errorf("tools %v", tools)
	}
}

// TestCompletionsCompat checks vendor differences in the request.
func TestCompletionsCompat(t *testing.T) {
	t.Parallel()
	reply := sse(`{"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}`, "[DONE]")
	hist := []message.Message{
		message.User("q", 1),
		{Role: message.RoleAssistant, API: "anthropic-messages", Provider: "anthropic", Model: "c", StopReason: message.StopToolUse,
			Content: message.BlocksOf(message.ToolCall("toolu_01ABC", "read", nil))},
		{Role: message.RoleToolResult, ToolCallID: "toolu_01ABC", ToolName: "read", Content: message.BlocksOf(message.Text("r"))},
		message.User("more", 2),
	}
	t.Run("mistral", func(t *testing.T) {
		t.Parallel()
		srv := wiretest.ServeBody(t, 200, "text/event-stream", reply, 0)
		m := chatModel(srv.URL, "mistral", "devstral-medium-latest")
		_, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), &provider.Request{Model: m, Messages: hist, SystemPrompt: "s"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		body := decode(t, srv.Last(t).Body)
		msgs := body["messages"].([]any)
		call := msgs[2].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
		id := call["id"].(string)
		tool := msgs[3].(map[string]any)
		if len(id) != 9 || tool["tool_call_id"] != id || tool["name"] != "read" {
			t.Errorf("mistral ids: call %q result %v", id, tool)
		}
		if msgs[4].(map[string]any)["role"] != "assistant" || msgs[0].(map[string]any)["role"] != "system" {
			t.Errorf("mistral ordering: %s", srv.Last(t).Body)
		}
		if _, ok := body["max_tokens"]; !ok || body["store"] != nil || body["stream_options"] != nil {
			t.Errorf("mistral fields: %s", srv.Last(t).Body)
		}
	})
	t.Run("openrouter", func(t *testing.T) {
		t.Parallel()
		srv := wiretest.ServeBody(t, 200, "text/event-stream", reply, 0)
		m := chatModel(srv.URL, "openrouter", "anthropic/claude-sonnet-4.5")
		m.Reasoning = true
		_, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), &provider.Request{Model: m, Messages: hist, Thinking: provider.ThinkingLow}, nil)
		if err != nil {
			t.Fatal(err)
		}
		body := decode(t, srv.Last(t).Body)
		if r, _ := body["reasoning"].(map[string]any); r["effort"] != "low" {
			t.Errorf("reasoning %v", body["reasoning"])
		}
		msgs := body["messages"].([]any)
		lastUser := msgs[len(msgs)-1].(map[string]any)["content"].([]any)[0].(map[string]any)
		if lastUser["cache_control"] == nil {
			t.Errorf("no cache_control on the last user message: %v", lastUser)
		}
		if tools, ok := body["tools"].([]any); !ok || len(tools) != 0 {
			t.Errorf("history with tool calls needs tools: [] (got %v)", body["tools"])
		}
	})
	t.Run("same-model reasoning replay", func(t *testing.T) {
		t.Parallel()
		srv := wiretest.ServeBody(t, 200, "text/event-stream", reply, 0)
		m := chatModel(srv.URL, "openrouter", "google/gemini-2.5-pro")
		m.Reasoning = true
		enc := `{"type":"reasoning.encrypted","id":"call_1","data":"ENC"}`
		hist := []message.Message{
			message.User("q", 1),
			{Role: message.RoleAssistant, API: m.API, Provider: m.Provider, Model: m.ID, StopReason: message.StopToolUse,
				Content: message.BlocksOf(message.Thinking("why", "reasoning"),
					message.Block{Type: message.BlockToolCall, ID: "call_1", Name: "read", Arguments: map[string]any{}, ThoughtSignature: enc})},
			{Role: message.RoleToolResult, ToolCallID: "call_1", ToolName: "read", Content: message.BlocksOf(message.Text("r"))},
		}
		_, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), &provider.Request{Model: m, Messages: hist}, nil)
		if err != nil {
			t.Fatal(err)
		}
		asst := decode(t, srv.Last(t).Body)["messages"].([]any)[1].(map[string]any)
		det, _ := asst["reasoning_details"].([]any)
		if asst["reasoning"] != "why" || len(det) != 1 || det[0].(map[string]any)["data"] != "ENC" {
			t.Errorf("assistant %v", asst)
		}
	})
	t.Run("ollama without key", func(t *testing.T) {
		t.Parallel()
		srv := wiretest.ServeBody(t, 200, "text/event-stream", reply, 0)
		m := chatModel(srv.URL, "ollama", "qwen3")
		_, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), &provider.Request{Model: m, Messages: hist[:1]}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if h := srv.Last(t).Header.Get("Authorization"); h != "" {
			t.Errorf("authorization sent without a key: %q", h)
		}
		// Ollama runs the model with the model's window, not its small
		// default that silently truncates long sessions.
		if opts, _ := decode(t, srv.Last(t).Body)["options"].(map[string]any); opts["num_ctx"] != float64(m.ContextWindow) {
			t.Errorf("options %v, want num_ctx %d", opts, m.ContextWindow)
		}
	})
	t.Run("no ollama options elsewhere", func(t *testing.T) {
		t.Parallel()
		srv := wiretest.ServeBody(t, 200, "text/event-stream", reply, 0)
		m := chatModel(srv.URL, "vllm", "qwen3")
		if _, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), &provider.Request{Model: m, Messages: hist[:1]}, nil); err != nil {
			t.Fatal(err)
		}
		if opts, ok := decode(t, srv.Last(t).Body)["options"]; ok {
			t.Errorf("options %v sent to a non-Ollama endpoint", opts)
		}
	})
}

// TestCompletionsStreams covers streams the recordings lack.
func TestCompletionsStreams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		body   []byte
		check  func(t *testing.T, msg message.Message, err error)
		reason provider.Reason
	}{
		{
			name: "openrouter reasoning and encrypted details on a split tool call",
			body: sse(
				`{"choices":[{"delta":{"reasoning":"think"}}]}`,
				`{"choices":[{"delta":{"reasoning":"ing","reasoning_details":[{"type":"reasoning.encrypted","id":"call_1","data":"ENC"}]}}]}`,
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"read","arguments":"{\"pa"}}]}}]}`,
				`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":1}"}}]}}]}`,
				`{"choices":[{"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4,"cache_write_tokens":2}}}`,
				"[DONE]"),
			check: func(t *testing.T, msg message.Message, err error) {
				b := msg.Content.Blocks
				if err != nil || len(b) != 2 || b[0].Thinking != "thinking" || b[0].ThinkingSignature != "reasoning" ||
					b[1].Arguments["path"] != float64(1) || !strings.Contains(b[1].ThoughtSignature, "ENC") {
					t.Fatalf("%v %+v", err, b)
				}
				u := msg.Usage
				if u.Input != 4 || u.CacheRead != 4 || u.CacheWrite != 2 || u.Output != 5 || u.TotalTokens != 15 {
					t.Errorf("usage %+v", u)
				}
				if want := (4*1 + 5*2 + 4*0.5) / 1e6; u.Cost.Total < want*0.999 || u.Cost.Total > want*1.001 {
					t.Errorf("cost %v, want %v", u.Cost.Total, want)
				}
			},
		},
		{name: "malformed json", body: []byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {nope\n\n"), reason: provider.ReasonTimeout,
			check: func(t *testing.T, msg message.Message, err error) {
				if msg.Content.Text() != "a" {
					t.Errorf("partial text lost: %+v", msg)
				}
			}},
		{name: "truncated", body: sse(`{"choices":[{"delta":{"content":"a"}}]}`), reason: provider.ReasonTimeout},
		{name: "unknown event", body: []byte("event: surprise\ndata: {}\n\n"), reason: provider.ReasonTimeout},
		{name: "error event", body: []byte("event: error\ndata: {\"error\":{\"message\":\"Rate limit reached\",\"code\":\"rate_limit_exceeded\"}}\n\n"), reason: provider.ReasonRateLimit},
		{name: "content filter", body: sse(`{"choices":[{"delta":{},"finish_reason":"content_filter"}]}`), reason: provider.ReasonUnknown},
		{name: "finish without DONE", body: sse(`{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}`),
			check: func(t *testing.T, msg message.Message, err error) {
				if err != nil || msg.StopReason != message.StopStop {
					t.Errorf("%v %v", err, msg.StopReason)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.ServeBody(t, 200, "text/event-stream", tc.body, 5)
			msg, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), &provider.Request{Model: chatModel(srv.URL, "openrouter", "x")}, nil)
			if tc.reason != "" {
				if got := provider.ReasonOf(err); got != tc.reason || msg.StopReason != message.StopError {
					t.Errorf("reason %s (%v), stop %s; want %s", got, err, msg.StopReason, tc.reason)
				}
			}
			if tc.check != nil {
				tc.check(t, msg, err)
			}
		})
	}
}

// TestCompletionsHTTPErrors classifies error statuses and bodies.
func TestCompletionsHTTPErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status  int
		headers map[string]string
		body    string
		reason  provider.Reason
		retry   time.Duration
	}{
		{400, nil, `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`, provider.ReasonContextOverflow, 0},
		{401, nil, `{"error":{"message":"Incorrect API key provided: sk-***.","type":"invalid_request_error","code":"invalid_api_key"}}`, provider.ReasonAuthPermanent, 0},
		{403, nil, `{"error":{"message":"Project does not have access","type":"invalid_request_error"}}`, provider.ReasonAuth, 0},
		{402, nil, `{"error":{"message":"Insufficient credits","code":402}}`, provider.ReasonBilling, 0},
		{429, map[string]string{"Retry-After": "7"}, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, provider.ReasonRateLimit, 7 * time.Second},
		{429, nil, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`, provider.ReasonBilling, 0},
		{500, nil, `{"error":{"message":"The server had an error","type":"server_error"}}`, provider.ReasonTimeout, 0},
		{502, map[string]string{"Content-Type": "text/html"}, `<html>bad gateway</html>`, provider.ReasonTimeout, 0},
		{503, nil, `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error"}}`, provider.ReasonOverloaded, 0},
	} {
		t.Run(fmt.Sprint(tc.status, tc.reason), func(t *testing.T) {
			t.Parallel()
			h := map[string]string{"Content-Type": "application/json"}
			for k, v := range tc.headers {
				h[k] = v
			}
			srv := wiretest.New(t, func(w http.ResponseWriter, r *http.Request) { wiretest.Reply(w, tc.status, h, []byte(tc.body), 0) })
			var events []provider.Event
			msg, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), &provider.Request{Model: chatModel(srv.URL, "openai", "gpt-4o"), APIKey: "sk-secret"}, func(e provider.Event) { events = append(events, e) })
			var pe *provider.Error
			if !errors.As(err, &pe) {
				t.Fatalf("%T %v", err, err)
			}
			if pe.Reason != tc.reason || pe.Status != tc.status || pe.RetryAfter != tc.retry {
				t.Errorf("got %+v", pe)
			}
			if msg.StopReason != message.StopError || msg.ErrorMessage == "" || events[len(events)-1].Type != provider.EventError {
				t.Errorf("message %+v", msg)
			}
			if strings.Contains(err.Error(), "sk-secret") {
				t.Error("key in error")
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests: SDK retries must be off", n)
			}
		})
	}
}

// TestCompletionsBrokenConnections: a reset, a stall and an abort end as
// classified errors with the partial text kept, never a hang.
func TestCompletionsBrokenConnections(t *testing.T) {
	t.Parallel()
	prefix := sse(`{"choices":[{"delta":{"content":"par"}}]}`, `{"choices":[{"delta":{"content":"tial"}}]}`)
	wiretest.Broken(t, prefix, "partial", func(ctx context.Context, url string, idle time.Duration, emit func(provider.Event)) (message.Message, error) {
		return openai.NewCompletions(openai.Config{IdleTimeout: idle}).Stream(ctx, &provider.Request{Model: chatModel(url, "openai", "x")}, emit)
	})
}

// TestCompletionsConnections: calls through one adapter reuse their
// connections, though the adapter stops reading at [DONE]; a server that
// keeps the stream open after it does not hold up the reply.
func TestCompletionsConnections(t *testing.T) {
	t.Parallel()
	body := wiretest.Body(t, "openai-completions-parallel-tool-calls.sse")
	a := openai.NewCompletions(openai.Config{})
	call := func(ctx context.Context, url string) (message.Message, error) {
		return a.Stream(ctx, &provider.Request{Model: chatModel(url, "openai", "gpt-4o"), Messages: []message.Message{message.User("hi", 1)}, APIKey: "k"}, nil)
	}
	t.Run("reuse", func(t *testing.T) { t.Parallel(); wiretest.Reuse(t, body, call) })
	t.Run("held", func(t *testing.T) { t.Parallel(); wiretest.Held(t, body, call) })
}

// TestCompletionsJSONInsteadOfStream: a gateway answering 200 with a JSON
// error body ends as that classified error.
func TestCompletionsJSONInsteadOfStream(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "application/json", []byte(`{"error":{"message":"Rate limit exceeded: free-models-per-day","code":429}}`), 0)
	msg, err := openai.NewCompletions(openai.Config{}).Stream(t.Context(), &provider.Request{Model: chatModel(srv.URL, "openrouter", "x")}, nil)
	if provider.ReasonOf(err) != provider.ReasonRateLimit || msg.StopReason != message.StopError {
		t.Errorf("%v %+v", err, msg)
	}
}

// TestHeaders pins what the SDK used to send for us: the key as a bearer
// (none without a key), configured headers on top, and the base URL joined
// as the SDK joined it (its query dropped).
func TestHeaders(t *testing.T) {
	t.Parallel()
	srv := wiretest.ServeBody(t, 200, "text/event-stream", sse(`{"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}`), 0)
	for _, tc := range []struct {
		name, base, key string
		headers         map[string]string
		path            string
		want            map[string]string // "" = absent
	}{
		{"key", srv.URL + "/v1", "sk-k", nil, "/v1/chat/completions", map[string]string{
			"Authorization": "Bearer sk-k", "Content-Type": "application/json", "Accept": "text/event-stream"}},
		{"no key", srv.URL + "/api/v1/", "", nil, "/api/v1/chat/completions", map[string]string{"Authorization": ""}},
		{"query dropped", srv.URL + "/v1?x=1", "", nil, "/v1/chat/completions", nil},
		{"configured", srv.URL + "/v1", "sk-k", map[string]string{"Authorization": "Token t", "HTTP-Referer": "https://x"}, "/v1/chat/completions", map[string]string{
			"Authorization": "Token t", "Http-Referer": "https://x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := chatModel(srv.URL, "openai", "gpt-4o")
			m.BaseURL = tc.base
			_, err := openai.NewCompletions(openai.Config{Headers: tc.headers}).Stream(t.Context(), &provider.Request{Model: m, Messages: []message.Message{message.User("hi", 1)}, APIKey: provider.Secret(tc.key)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := srv.Last(t)
			if r.Method != "POST" || r.Path != tc.path || r.Query != "" {
				t.Errorf("%s %s?%s", r.Method, r.Path, r.Query)
			}
			for k, v := range tc.want {
				if got := r.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}
