package azure_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/azure"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/provider/openai"
)

// BenchmarkStream is one streamed reply of 200 deltas through Azure's
// routing and through OpenAI's Chat Completions in the same run: Azure
// adds its URL and header per call and nothing per event.
func BenchmarkStream(b *testing.B) {
	var sb strings.Builder
	for i := range 200 {
		fmt.Fprintf(&sb, `data: {"choices":[{"content_filter_results":{},"delta":{"content":"word%d "},"finish_reason":null,"index":0,"logprobs":null}],"created":1736196736,"id":"chatcmpl-AmnYz1Zk3mDqKbvLZ4K7dJ6iWrX2t","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_f3927aa00d","usage":null}`+"\n\n", i)
	}
	sb.WriteString(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":200,"total_tokens":220}}` + "\n\ndata: [DONE]\n\n")
	body := []byte(sb.String())
	run := func(b *testing.B, p provider.Provider, m provider.Model) {
		srv := wiretest.ServeBody(b, 200, "text/event-stream", body, 0)
		m.BaseURL = srv.URL + strings.TrimPrefix(m.BaseURL, "X")
		req := &provider.Request{Model: m, Messages: []message.Message{message.User("hi", 1)}, APIKey: "0123456789abcdef0123456789abcdef"}
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if msg, err := p.Stream(b.Context(), req, func(provider.Event) {}); err != nil || len(msg.Content.Blocks) != 1 {
				b.Fatal(err)
			}
		}
	}
	b.Run("azure", func(b *testing.B) {
		run(b, azure.New(azure.Config{}), provider.Model{ID: "gpt-4o", Provider: "azure", API: catalog.APIAzureCompletions, BaseURL: "X", ContextWindow: 128000, MaxTokens: 16384})
	})
	b.Run("completions", func(b *testing.B) {
		run(b, openai.NewCompletions(openai.Config{}), provider.Model{ID: "gpt-4o", Provider: "openai", API: catalog.APIOpenAICompletions, BaseURL: "X/v1", ContextWindow: 128000, MaxTokens: 16384})
	})
}
