package registry_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/registry"
)

// captured is what a fake provider received.
type captured struct {
	mu     sync.Mutex
	path   string
	header http.Header
	body   map[string]any
}

// speaking returns a local server that records the request and answers
// with the SSE stream sse.
func speaking(t *testing.T, sse string) (*httptest.Server, *captured) {
	t.Helper()
	c := &captured{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.path, c.header = r.URL.Path, r.Header.Clone()
		_ = json.Unmarshal(b, &c.body)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, sse)
	}))
	t.Cleanup(srv.Close)
	return srv, c
}

// streamsDefault checks that res's default model is want, that the
// worker may run it, and that a call of ref (its default model when "")
// streams "hi".
func streamsDefault(t *testing.T, res *registry.Resolver, want, ref string) {
	t.Helper()
	if d := res.DefaultModel(); d != want {
		t.Fatalf("default model %q", d)
	}
	if _, err := res.Policy(want, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if ref == "" {
		ref = want
	}
	m, p, err := res.Resolve(ref)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := p.Stream(t.Context(), &provider.Request{Model: m, Messages: []message.Message{message.User("q", 1)}}, nil)
	if err != nil || msg.Content.Text() != "hi" {
		t.Fatal(err)
	}
}

// TestPresets: each OpenAI-compatible preset works with only its key
// variable set (its base URL variable points at a local server speaking
// that provider's quirk): --model <provider>/<id> is the worker's default
// with that key alone, may run, sends the key as a bearer to
// chat/completions with the body the provider accepts (its token limit
// field, stream_options or not, its thinking switch), and reads the reply
// in the provider's shape (reasoning_content, usage in x_groq or in the
// choice, DeepSeek's cache hits).
func TestPresets(t *testing.T) {
	t.Parallel()
	const stop = `data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}` + "\n\ndata: [DONE]\n\n"
	for _, tc := range []struct {
		keyEnv, baseEnv, ref string
		thinking             provider.ThinkingLevel
		sse                  string
		want, absent         []string // body fields present, absent
		check                func(t *testing.T, msg message.Message, body map[string]any)
	}{
		{keyEnv: "MISTRAL_API_KEY", baseEnv: "MISTRAL_BASE_URL", ref: "mistral/devstral-medium-latest", sse: stop,
			want: []string{"max_tokens"}, absent: []string{"stream_options", "max_completion_tokens"}},
		{keyEnv: "GROQ_API_KEY", baseEnv: "GROQ_BASE_URL", ref: "groq/llama-3.3-70b-versatile",
			// Groq's usage arrives in x_groq.usage.
			sse: `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"llama-3.3-70b-versatile","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"x_groq":{"id":"req_01"}}` + "\n\n" +
				`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}` + "\n\n" +
				`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x_groq":{"id":"req_01","usage":{"queue_time":0.01,"prompt_tokens":40,"prompt_time":0.002,"completion_tokens":2,"completion_time":0.003,"total_tokens":42,"total_time":0.005}}}` + "\n\ndata: [DONE]\n\n",
			want: []string{"max_completion_tokens", "stream_options"}, absent: []string{"max_tokens"},
			check: func(t *testing.T, msg message.Message, _ map[string]any) {
				if msg.Usage == nil || msg.Usage.Input != 40 || msg.Usage.Output != 2 || msg.Usage.Cost.Total == 0 {
					t.Errorf("groq usage %+v", msg.Usage)
				}
			}},
		{keyEnv: "XAI_API_KEY", baseEnv: "XAI_BASE_URL", ref: "xai/grok-4", thinking: provider.ThinkingHigh, sse: stop,
			want: []string{"max_tokens", "stream_options"}, absent: []string{"reasoning_effort"}},
		{keyEnv: "DEEPSEEK_API_KEY", baseEnv: "DEEPSEEK_BASE_URL", ref: "deepseek/deepseek-reasoner", thinking: provider.ThinkingHigh,
			sse: `data: {"id":"1","object":"chat.completion.chunk","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Two plus two"},"finish_reason":null}]}` + "\n\n" +
				`data: {"id":"1","object":"chat.completion.chunk","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"4","reasoning_content":null},"finish_reason":null}]}` + "\n\n" +
				`data: {"id":"1","object":"chat.completion.chunk","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"","reasoning_content":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":15},"prompt_cache_hit_tokens":768,"prompt_cache_miss_tokens":232}}` + "\n\ndata: [DONE]\n\n",
			want: []string{"max_tokens"}, absent: []string{"reasoning_effort"},
			check: func(t *testing.T, msg message.Message, _ map[string]any) {
				if len(msg.Content.Blocks) != 2 || msg.Content.Blocks[0].Type != message.BlockThinking || msg.Content.Blocks[0].Thinking != "Two plus two" || msg.Content.Text() != "4" {
					t.Errorf("deepseek reasoning_content: %+v", msg.Content.Blocks)
				}
				if msg.Usage == nil || msg.Usage.CacheRead != 768 || msg.Usage.Input != 232 {
					t.Errorf("deepseek cache hits: %+v", msg.Usage)
				}
			}},
		{keyEnv: "TOGETHER_API_KEY", baseEnv: "TOGETHER_BASE_URL", ref: "together/meta-llama/Llama-3.3-70B-Instruct-Turbo", sse: stop,
			want: []string{"max_tokens", "stream_options"}},
		{keyEnv: "FIREWORKS_API_KEY", baseEnv: "FIREWORKS_BASE_URL", ref: "fireworks/accounts/fireworks/models/gpt-oss-120b", thinking: provider.ThinkingLow, sse: stop,
			want: []string{"max_tokens", "stream_options", "reasoning_effort"}},
		{keyEnv: "CEREBRAS_API_KEY", baseEnv: "CEREBRAS_BASE_URL", ref: "cerebras/gpt-oss-120b", sse: stop,
			want: []string{"max_completion_tokens", "stream_options"}, absent: []string{"max_tokens"},
			check: func(t *testing.T, _ message.Message, body map[string]any) {
				tools, _ := body["tools"].([]any)
				if len(tools) != 1 || tools[0].(map[string]any)["function"].(map[string]any)["strict"] != false {
					t.Errorf("cerebras tools: %v", body["tools"])
				}
			}},
		{keyEnv: "MOONSHOT_API_KEY", baseEnv: "MOONSHOT_BASE_URL", ref: "moonshot/kimi-k2-thinking", thinking: provider.ThinkingHigh,
			// Kimi puts the usage in the last choice.
			sse: `data: {"id":"c1","object":"chat.completion.chunk","model":"kimi-k2-thinking","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"hmm"},"finish_reason":null}]}` + "\n\n" +
				`data: {"id":"c1","object":"chat.completion.chunk","model":"kimi-k2-thinking","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}` + "\n\n" +
				`data: {"id":"c1","object":"chat.completion.chunk","model":"kimi-k2-thinking","choices":[{"index":0,"delta":{},"finish_reason":"stop","usage":{"prompt_tokens":30,"completion_tokens":5,"total_tokens":35,"cached_tokens":0}}]}` + "\n\ndata: [DONE]\n\n",
			want: []string{"max_tokens"}, absent: []string{"reasoning_effort"},
			check: func(t *testing.T, msg message.Message, _ map[string]any) {
				if msg.Usage == nil || msg.Usage.Input != 30 || msg.Usage.Output != 5 || msg.Content.Blocks[0].Thinking != "hmm" {
					t.Errorf("moonshot: %+v %+v", msg.Usage, msg.Content.Blocks)
				}
			}},
		{keyEnv: "ZAI_API_KEY", baseEnv: "ZAI_BASE_URL", ref: "zai/glm-4.6", thinking: provider.ThinkingMedium, sse: stop,
			want: []string{"max_tokens", "thinking"}, absent: []string{"stream_options", "enable_thinking", "reasoning_effort"},
			check: func(t *testing.T, _ message.Message, body map[string]any) {
				if th, _ := body["thinking"].(map[string]any); th["type"] != "enabled" {
					t.Errorf("zai thinking %v", body["thinking"])
				}
			}},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			t.Parallel()
			srv, got := speaking(t, tc.sse)
			res := registry.NewResolver(registry.ResolverConfig{Env: envOf(map[string]string{tc.keyEnv: "key-" + tc.keyEnv, tc.baseEnv: srv.URL + "/v1"})})
			if d, prov := res.DefaultModel(), strings.SplitN(tc.ref, "/", 2)[0]; !strings.HasPrefix(d, prov+"/") {
				t.Errorf("default model with only %s: %q", tc.keyEnv, d)
			}
			if _, err := res.Policy(tc.ref, nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			m, p, err := res.Resolve(tc.ref)
			if err != nil {
				t.Fatal(err)
			}
			req := &provider.Request{Model: m, Thinking: tc.thinking, Messages: []message.Message{message.User("2+2?", 1)},
				Tools: []provider.Tool{{Name: "calc", Description: "adds", Parameters: map[string]any{"type": "object"}}}}
			msg, err := p.Stream(t.Context(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			got.mu.Lock()
			defer got.mu.Unlock()
			if got.path != "/v1/chat/completions" || got.header.Get("Authorization") != "Bearer key-"+tc.keyEnv {
				t.Errorf("call %s %q", got.path, got.header.Get("Authorization"))
			}
			for _, f := range tc.want {
				if _, ok := got.body[f]; !ok {
					t.Errorf("body has no %s: %v", f, keys(got.body))
				}
			}
			for _, f := range tc.absent {
				if _, ok := got.body[f]; ok {
					t.Errorf("body sends %s: %v", f, keys(got.body))
				}
			}
			if tc.check != nil {
				tc.check(t, msg, got.body)
			}
		})
	}
}

// TestMistralToolCallIDs: Mistral accepts only nine-alphanumeric tool
// call ids, so another model's ids are rewritten (the same id the same
// way) in the history sent to it, whatever the model.
func TestMistralToolCallIDs(t *testing.T) {
	t.Parallel()
	srv, got := speaking(t, `data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	r := registry.FromEnv(envOf(map[string]string{"MISTRAL_API_KEY": "k", "MISTRAL_BASE_URL": srv.URL}))
	res, p, err := r.ProviderFor("mistral/some-future-model")
	if err != nil {
		t.Fatal(err)
	}
	const id = "toolu_01A09q90qw90lq917835lq9"
	hist := []message.Message{message.User("q", 1),
		{Role: message.RoleAssistant, Content: message.BlocksOf(message.ToolCall(id, "calc", map[string]any{})), StopReason: message.StopToolUse, API: "anthropic-messages", Provider: "anthropic", Model: "claude"},
		{Role: message.RoleToolResult, ToolCallID: id, ToolName: "calc", Content: message.BlocksOf(message.Text("4"))}}
	if _, err := p.Stream(t.Context(), &provider.Request{Model: res.Model, Messages: hist}, nil); err != nil {
		t.Fatal(err)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	ms, _ := got.body["messages"].([]any)
	var callID, resultID string
	for _, m := range ms {
		mm := m.(map[string]any)
		if tcs, ok := mm["tool_calls"].([]any); ok {
			callID, _ = tcs[0].(map[string]any)["id"].(string)
		}
		if mm["role"] == "tool" {
			resultID, _ = mm["tool_call_id"].(string)
			if mm["name"] != "calc" {
				t.Errorf("tool result without its name: %v", mm)
			}
		}
	}
	if len(callID) != 9 || callID != resultID || strings.Trim(callID, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
		t.Errorf("ids sent: call %q result %q", callID, resultID)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
