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

func respModel(url, id string) provider.Model {
	return provider.Model{ID: id, Provider: "openai", API: "openai-responses", BaseURL: url + "/v1", Reasoning: true,
		ContextWindow: 400000, MaxTokens: 128000, Input: []string{"text", "image"},
		Cost: provider.ModelCost{Input: 1.25, Output: 10, CacheRead: 0.125}}
}

func TestResponsesWire(t *testing.T) {
	t.Parallel()
	for _, c := range wiretest.Cases(t, "openai-responses") {
		t.Run(c.File, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.Serve(t, c)
			var events []provider.Event
			req := &provider.Request{Model: respModel(srv.URL, "gpt-5"), Messages: []message.Message{message.User("hi", 1)}, APIKey: "sk-x"}
			msg, err := openai.NewResponses(openai.Config{}).Stream(t.Context(), req, func(e provider.Event) { events = append(events, e) })
			// Ids are stored as "call_id|item_id"; the wire's id is the call id.
			cmp := msg.Clone()
			for i, b := range cmp.Content.Blocks {
				if b.Type == message.BlockToolCall {
					cmp.Content.Blocks[i].ID, _, _ = strings.Cut(b.ID, "|")
				}
			}
			wiretest.Check(t, c, cmp, err, completionsUsage)
			checkEvents(t, events, msg)
			if r := srv.Last(t); r.Path != "/v1/responses" {
				t.Errorf("path %s", r.Path)
			}
			for _, b := range msg.Content.Blocks {
				switch b.Type {
				case message.BlockThinking:
					if !strings.Contains(b.ThinkingSignature, "encrypted_content") {
						t.Errorf("reasoning item not kept: %.80s", b.ThinkingSignature)
					}
				case message.BlockToolCall:
					if !strings.Contains(b.ID, "|fc_") {
						t.Errorf("tool call id %q lacks the item id", b.ID)
					}
				}
			}
		})
	}
}

// TestResponsesRoundTrip replays what a recorded reply assembled: the
// reasoning item goes back verbatim, text with its message id, tool calls
// as function_call items with call and item ids.
func TestResponsesRoundTrip(t *testing.T) {
	t.Parallel()
	body := wiretest.Body(t, "openai-responses-reasoning-summary-text.sse")
	srv := wiretest.ServeBody(t, 200, "text/event-stream", body, 0)
	m := respModel(srv.URL, "gpt-5")
	first, err := openai.NewResponses(openai.Config{}).Stream(t.Context(), &provider.Request{Model: m, Messages: []message.Message{message.User("weather?", 1)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := message.Message{Role: message.RoleAssistant, API: m.API, Provider: m.Provider, Model: m.ID, StopReason: message.StopToolUse,
		Content: message.BlocksOf(message.ToolCall("call_1|fc_1", "read", map[string]any{"p": 1}))}
	req := &provider.Request{Model: m, SystemPrompt: "sys", Thinking: provider.ThinkingXHigh, SessionID: "sess-1", MaxTokens: 500,
		Tools: []provider.Tool{{Name: "read", Parameters: map[string]any{"type": "object"}}},
		Messages: []message.Message{message.User("weather?", 1), first, call,
			{Role: message.RoleToolResult, ToolCallID: "call_1|fc_1", Content: message.BlocksOf(message.Text("sunny"))},
			{Role: message.RoleAssistant, API: "anthropic-messages", Provider: "anthropic", Model: "c", StopReason: message.StopToolUse,
				Content: message.BlocksOf(message.ToolCall("toolu_9", "read", nil))},
			{Role: message.RoleToolResult, ToolCallID: "toolu_9", Content: message.BlocksOf(message.Image("image/png", "AA"))},
		}}
	if _, err := openai.NewResponses(openai.Config{}).Stream(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Input           []map[string]any
		Reasoning       map[string]any
		Include         []string
		PromptCacheKey  string `json:"prompt_cache_key"`
		MaxOutputTokens int    `json:"max_output_tokens"`
		Store           bool
		Tools           []map[string]any
	}
	raw := srv.Last(t).Body
	if err := json.Unmarshal(raw, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Reasoning["effort"] != "high" || sent.Reasoning["summary"] != "auto" || len(sent.Include) != 1 || sent.PromptCacheKey != "sess-1" || sent.MaxOutputTokens != 500 || sent.Store {
		t.Errorf("params: %.400s", raw)
	}
	types := []string{}
	for _, it := range sent.Input {
		s, _ := it["type"].(string)
		if s == "" {
			s = "msg:" + fmt.Sprint(it["role"])
		}
		types = append(types, s)
	}
	want := "msg:developer,msg:user,reasoning,message,function_call,function_call_output,function_call,function_call_output"
	if got := strings.Join(types, ","); got != want {
		t.Fatalf("input items %s\nwant %s", got, want)
	}
	if sent.Input[2]["encrypted_content"] == nil || sent.Input[3]["id"] == nil {
		t.Errorf("reasoning/message ids not replayed: %v %v", sent.Input[2]["id"], sent.Input[3])
	}
	if fc := sent.Input[4]; fc["call_id"] != "call_1" || fc["id"] != "fc_1" {
		t.Errorf("function call %v", fc)
	}
	if fc := sent.Input[6]; fc["call_id"] != "toolu_9" || fc["id"] != nil {
		t.Errorf("other model's call %v", fc)
	}
	if out, ok := sent.Input[7]["output"].([]any); !ok || len(out) != 1 {
		t.Errorf("image output %v", sent.Input[7])
	}
	if sent.Tools[0]["type"] != "function" || sent.Tools[0]["name"] != "read" {
		t.Errorf("tools %v", sent.Tools)
	}
}

func TestResponsesStreams(t *testing.T) {
	t.Parallel()
	ev := func(typ, rest string) string {
		return fmt.Sprintf("event: %s\ndata: {\"type\":%q%s}\n\n", typ, typ, rest)
	}
	for _, tc := range []struct {
		name   string
		body   string
		reason provider.Reason
		check  func(t *testing.T, msg message.Message)
	}{
		{name: "incomplete", body: ev("response.output_text.delta", `,"output_index":0,"delta":"cut"`) +
			ev("response.incomplete", `,"response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":7,"total_tokens":12}}`),
			check: func(t *testing.T, msg message.Message) {
				if msg.StopReason != message.StopLength || msg.Content.Text() != "cut" || msg.Usage.Output != 7 {
					t.Errorf("%+v", msg)
				}
			}},
		{name: "flat error event", body: ev("error", `,"code":"rate_limit_exceeded","message":"Rate limit reached"`), reason: provider.ReasonRateLimit},
		{name: "unknown event", body: ev("response.surprise", ``), reason: provider.ReasonTimeout},
		{name: "truncated", body: ev("response.output_text.delta", `,"output_index":0,"delta":"half"`), reason: provider.ReasonTimeout},
		{name: "malformed", body: "event: response.completed\ndata: {no\n\n", reason: provider.ReasonTimeout},
		{name: "flex tier halves cost", body: ev("response.completed", `,"response":{"status":"completed","service_tier":"flex","usage":{"input_tokens":1000000,"output_tokens":0,"total_tokens":1000000}}`),
			check: func(t *testing.T, msg message.Message) {
				if msg.Usage.Cost.Total != 0.625 {
					t.Errorf("cost %+v", msg.Usage.Cost)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := wiretest.ServeBody(t, 200, "text/event-stream", []byte(tc.body), 9)
			msg, err := openai.NewResponses(openai.Config{IdleTimeout: time.Second}).Stream(t.Context(), &provider.Request{Model: respModel(srv.URL, "gpt-5")}, nil)
			wiretest.Outcome(t, msg, err, tc.reason, tc.check)
		})
	}
}

func BenchmarkResponsesStream(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"},\"output_index\":0,\"sequence_number\":2}\n\n")
	for i := range 2000 {
		fmt.Fprintf(&sb, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"content_index\":0,\"delta\":\"word%d \",\"item_id\":\"msg_05080461b406f3f501696a140a70d88195a2ce4c1a4eb39696\",\"output_index\":0,\"sequence_number\":%d}\n\n", i, i+3)
	}
	sb.WriteString("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":2000,\"total_tokens\":2005}}}\n\n")
	body := []byte(sb.String())
	wiretest.Bench(b, body, func(url string) (provider.Provider, *provider.Request) {
		return openai.NewResponses(openai.Config{}), &provider.Request{Model: respModel(url, "gpt-5"), Messages: []message.Message{message.User("hi", 1)}}
	})
}

func TestResponsesHTTPErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		hdr    map[string]string
		body   string
		reason provider.Reason
		retry  time.Duration
	}{
		{400, nil, `{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","code":"context_length_exceeded"}}`, provider.ReasonContextOverflow, 0},
		{401, nil, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`, provider.ReasonAuthPermanent, 0},
		{429, map[string]string{"Retry-After": "3"}, `{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}`, provider.ReasonRateLimit, 3 * time.Second},
		{500, nil, `{"error":{"message":"The server had an error","type":"server_error"}}`, provider.ReasonTimeout, 0},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			h := map[string]string{"Content-Type": "application/json"}
			for k, v := range tc.hdr {
				h[k] = v
			}
			srv := wiretest.New(t, func(w http.ResponseWriter, r *http.Request) { wiretest.Reply(w, tc.status, h, []byte(tc.body), 0) })
			msg, err := openai.NewResponses(openai.Config{}).Stream(t.Context(), &provider.Request{Model: respModel(srv.URL, "gpt-5"), APIKey: "k"}, nil)
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Reason != tc.reason || pe.Status != tc.status || pe.RetryAfter != tc.retry || msg.StopReason != message.StopError {
				t.Errorf("got %+v", err)
			}
		})
	}
}

func TestResponsesBrokenConnections(t *testing.T) {
	t.Parallel()
	prefix := []byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"partial\"}\n\n")
	wiretest.Broken(t, prefix, "partial", func(ctx context.Context, url string, idle time.Duration, emit func(provider.Event)) (message.Message, error) {
		return openai.NewResponses(openai.Config{IdleTimeout: idle}).Stream(ctx, &provider.Request{Model: respModel(url, "gpt-5")}, emit)
	})
}

// TestResponsesConnections: calls through one adapter reuse their
// connections, though the adapter stops reading at response.completed; a
// server that keeps the stream open after it does not hold up the reply.
func TestResponsesConnections(t *testing.T) {
	t.Parallel()
	body := wiretest.Body(t, "openai-responses-parallel-function-calls.sse")
	a := openai.NewResponses(openai.Config{})
	call := func(ctx context.Context, url string) (message.Message, error) {
		return a.Stream(ctx, &provider.Request{Model: respModel(url, "gpt-5"), Messages: []message.Message{message.User("hi", 1)}, APIKey: "k"}, nil)
	}
	t.Run("reuse", func(t *testing.T) { t.Parallel(); wiretest.Reuse(t, body, call) })
	t.Run("held", func(t *testing.T) { t.Parallel(); wiretest.Held(t, body, call) })
}

// BenchmarkResponsesShortReply reads a real short Responses reply (the
// cached-input fixture: response.created and response.completed echo the
// whole response) from a local server: the fixed cost of a call, as
// BenchmarkCompletionsShortReply.
func BenchmarkResponsesShortReply(b *testing.B) {
	body := wiretest.Body(b, "openai-responses-cached-input.sse")
	wiretest.Bench(b, body, func(url string) (provider.Provider, *provider.Request) {
		return openai.NewResponses(openai.Config{}), &provider.Request{Model: respModel(url, "gpt-5"), Messages: []message.Message{message.User("hi", 1)}}
	})
}
