package vertex_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/openai"
	"github.com/lanefleet/lanefleet/provider/vertex"
)

// benchDeltas is the number of text deltas in a benchmark reply.
const benchDeltas = 2000

// BenchmarkStream reads an equal 2,000-delta reply through each Vertex
// family and, as the baseline of the same run, the Chat Completions
// adapter: CPU and allocations per streamed call (the token is cached,
// as in production).
func BenchmarkStream(b *testing.B) {
	var chat, gem, claude strings.Builder
	for i := range benchDeltas {
		fmt.Fprintf(&chat, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1782321902,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"word%d "},"finish_reason":null}]}`+"\n\n", i)
		fmt.Fprintf(&gem, `data: {"candidates": [{"content": {"role": "model","parts": [{"text": "word%d "}]}}],"modelVersion": "gemini-2.5-flash","createTime": "2026-11-29T10:00:00.000000Z","responseId": "r1"}`+"\r\n\r\n", i)
	}
	chat.WriteString(`data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":2000,"total_tokens":2020}}` + "\n\ndata: [DONE]\n\n")
	gem.WriteString(`data: {"candidates": [{"content": {"role": "model","parts": [{"text": ""}]},"finishReason": "STOP"}],"usageMetadata": {"promptTokenCount": 20,"candidatesTokenCount": 2000,"totalTokenCount": 2020}}` + "\r\n\r\n")
	claude.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n")
	claude.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range benchDeltas {
		fmt.Fprintf(&claude, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word%d \"}}\n\n", i)
	}
	claude.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	claude.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2000}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")

	msgs := []message.Message{message.User("hi", 1)}
	b.Run("openai-completions", func(b *testing.B) {
		srv := benchServer(b, []byte(chat.String()))
		m := provider.Model{ID: "gpt-4o-mini", Provider: "openai", API: "openai-completions", BaseURL: srv.URL + "/v1", ContextWindow: 128000, MaxTokens: 16384, Input: []string{"text"}}
		run(b, openai.NewCompletions(openai.Config{}), &provider.Request{Model: m, Messages: msgs, APIKey: "sk-k"}, chat.Len())
	})
	for _, f := range []struct {
		name, api, id string
		body          string
	}{
		{"vertex-gemini", "google-vertex", "gemini-2.5-flash", gem.String()},
		{"vertex-anthropic", "anthropic-vertex", "claude-sonnet-4-5@20250929", claude.String()},
	} {
		b.Run(f.name, func(b *testing.B) {
			ts := newTokenServer(b, time.Hour)
			key := serviceAccount(b, ts, "sa-a", "proj-a", keys()[0])
			srv := benchServer(b, []byte(f.body))
			a := vertex.New(vertex.Config{})
			b.Cleanup(a.Close)
			run(b, a, &provider.Request{Model: model(srv.URL, f.api, f.id), Messages: msgs, APIKey: provider.Secret(key)}, len(f.body))
		})
	}
}

// benchServer answers every request with body, as the wire tests' Bench
// does: the server's own work is the same for every adapter.
func benchServer(b *testing.B, body []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// run streams req b.N times and reports, besides the wall time, the
// process's CPU time per call (cpu-ns/op, client and local server alike):
// on a shared machine the wall time measures the neighbours too.
func run(b *testing.B, p provider.Provider, req *provider.Request, n int) {
	b.SetBytes(int64(n))
	b.ReportAllocs()
	before := cpuTime()
	for b.Loop() {
		msg, err := p.Stream(b.Context(), req, func(provider.Event) {})
		if err != nil || len(msg.Content.Blocks) != 1 {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
