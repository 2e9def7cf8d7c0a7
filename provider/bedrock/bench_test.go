package bedrock_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/internal/bedrocktest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/provider/openai"
)

// benchDeltas is the number of text deltas in a benchmark reply (as the
// Chat Completions benchmark's).
const benchDeltas = 2000

// BenchmarkStream reads the same 2,000-delta reply from a local server
// through the Bedrock adapter (ConverseStream event-stream frames, the
// SDK's request signing and decoding) and, in the same run, through the
// Chat Completions adapter (SSE chunks as OpenAI sends them): CPU and
// allocations per streamed call side by side.
func BenchmarkStream(b *testing.B) {
	b.Run("bedrock", func(b *testing.B) {
		f := bedrocktest.NewFrames().Start()
		for i := range benchDeltas {
			f.Event("contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"text": fmt.Sprintf("word%d ", i)}})
		}
		body := f.StopBlock(0).Stop("end_turn", map[string]any{"inputTokens": 20, "outputTokens": benchDeltas, "totalTokens": 20 + benchDeltas}).Body
		bench(b, "application/vnd.amazon.eventstream", body, func(url string) (provider.Provider, *provider.Request) {
			return adapter(), &provider.Request{Model: model(url, sonnet), Messages: []message.Message{message.User("hi", 1)}}
		})
	})
	b.Run("completions", func(b *testing.B) {
		var sb strings.Builder
		for i := range benchDeltas {
			fmt.Fprintf(&sb, `data: {"id":"chatcmpl-DuLdOuviL2tiVxMim6HmX4YMnCorK","object":"chat.completion.chunk","created":1782321902,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_bbc23ca3d7","choices":[{"index":0,"delta":{"content":"word%d "},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"cw1RS"}`+"\n\n", i)
		}
		sb.WriteString(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":2000,"total_tokens":2020}}` + "\n\ndata: [DONE]\n\n")
		bench(b, "text/event-stream", []byte(sb.String()), func(url string) (provider.Provider, *provider.Request) {
			m := provider.Model{ID: "gpt-4o-mini", Provider: "openai", API: "openai-completions", BaseURL: url + "/v1", ContextWindow: 128000, MaxTokens: 16384}
			return openai.NewCompletions(openai.Config{}), &provider.Request{Model: m, Messages: []message.Message{message.User("hi", 1)}, APIKey: "sk-k"}
		})
	})
}

// BenchmarkShortReply is the fixed cost of a call (signing, request,
// stream setup): a one-delta reply, through each adapter in the same run.
func BenchmarkShortReply(b *testing.B) {
	b.Run("bedrock", func(b *testing.B) {
		body := bedrocktest.NewFrames().Start().Text(0, "ok").Stop("end_turn", map[string]any{"inputTokens": 2, "outputTokens": 1, "totalTokens": 3}).Body
		bench(b, "application/vnd.amazon.eventstream", body, func(url string) (provider.Provider, *provider.Request) {
			return adapter(), &provider.Request{Model: model(url, sonnet), Messages: []message.Message{message.User("hi", 1)}}
		})
	})
	b.Run("completions", func(b *testing.B) {
		body := []byte(`data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}` + "\n\ndata: [DONE]\n\n")
		bench(b, "text/event-stream", body, func(url string) (provider.Provider, *provider.Request) {
			m := provider.Model{ID: "gpt-4o-mini", Provider: "openai", API: "openai-completions", BaseURL: url + "/v1", ContextWindow: 128000, MaxTokens: 16384}
			return openai.NewCompletions(openai.Config{}), &provider.Request{Model: m, Messages: []message.Message{message.User("hi", 1)}, APIKey: "sk-k"}
		})
	})
}

// bench streams body from a local server that replays it (no checks on
// the server's side: its work is not the adapter's) once per iteration.
func bench(b *testing.B, contentType string, body []byte, setup func(url string) (provider.Provider, *provider.Request)) {
	srv := wiretest.ServeBody(b, 200, contentType, body, 0)
	p, req := setup(srv.URL)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		msg, err := p.Stream(b.Context(), req, func(provider.Event) {})
		if err != nil || len(msg.Content.Blocks) != 1 {
			b.Fatal(err)
		}
	}
}
