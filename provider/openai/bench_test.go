package openai_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/provider/openai"
)

// benchDeltas is the number of text deltas in a benchmark reply.
const benchDeltas = 2000

func chatBenchBody() []byte {
	var b strings.Builder
	for i := range benchDeltas {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-DuLdOuviL2tiVxMim6HmX4YMnCorK","object":"chat.completion.chunk","created":1782321902,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_bbc23ca3d7","choices":[{"index":0,"delta":{"content":"word%d "},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"cw1RS"}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":2000,"total_tokens":2020}}` + "\n\ndata: [DONE]\n\n")
	return []byte(b.String())
}

// BenchmarkCompletionsStream reads a 2,000-delta reply from a local server:
// MB/s of SSE decoded and assembled, allocations per reply.
func BenchmarkCompletionsStream(b *testing.B) {
	body := chatBenchBody()
	wiretest.Bench(b, body, func(url string) (provider.Provider, *provider.Request) {
		return openai.NewCompletions(openai.Config{}), &provider.Request{Model: chatModel(url, "openai", "gpt-4o-mini"), Messages: []message.Message{message.User("hi", 1)}}
	})
}

// BenchmarkCompletionsShortReply sends a request and reads a one-delta reply
// from a local server: the fixed cost of a call (request, headers,
// connection, stream setup), which the long reply above hides.
func BenchmarkCompletionsShortReply(b *testing.B) {
	body := []byte(`data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}` + "\n\ndata: [DONE]\n\n")
	wiretest.Bench(b, body, func(url string) (provider.Provider, *provider.Request) {
		return openai.NewCompletions(openai.Config{}), &provider.Request{Model: chatModel(url, "openai", "gpt-4o-mini"), Messages: []message.Message{message.User("hi", 1)}, APIKey: "sk-k"}
	})
}
