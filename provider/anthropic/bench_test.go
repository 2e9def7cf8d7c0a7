package anthropic_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/anthropic"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

// BenchmarkStream reads a 2,000-delta reply from a local server: MB/s of
// SSE decoded and assembled, allocations per reply.
func BenchmarkStream(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("event: message_start\ndata: " + msgStart + "\n\n")
	sb.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range 2000 {
		fmt.Fprintf(&sb, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word%d \"}}\n\n", i)
	}
	sb.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	sb.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2000}}\n\n")
	sb.WriteString("event: message_stop\ndata: " + msgStop + "\n\n")
	body := []byte(sb.String())
	wiretest.Bench(b, body, func(url string) (provider.Provider, *provider.Request) {
		return anthropic.New(anthropic.Config{}), &provider.Request{Model: model(url, "claude-haiku-4-5"), Messages: []message.Message{message.User("hi", 1)}}
	})
}

// BenchmarkShortReply sends a request and reads a one-delta reply from a
// local server: the fixed cost of a call (request, headers, connection,
// stream setup), which the long reply above hides.
func BenchmarkShortReply(b *testing.B) {
	body := sse(msgStart,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`, msgStop)
	wiretest.Bench(b, body, func(url string) (provider.Provider, *provider.Request) {
		return anthropic.New(anthropic.Config{}), &provider.Request{Model: model(url, "claude-haiku-4-5"), Messages: []message.Message{message.User("hi", 1)}, APIKey: "sk-ant-api03-k"}
	})
}
