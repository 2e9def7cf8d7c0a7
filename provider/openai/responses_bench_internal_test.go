package openai

import (
	"fmt"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

// BenchmarkBuildResponsesRequest builds the body of one session's turn at 2 (a fresh
// session), 200 and 2,000 history messages, as the turns of a long session
// do: the same history and a new prompt each time. A turn's cost should
// not grow with the session; without the wire cache (the baseline) and
// with it.
func BenchmarkBuildResponsesRequest(b *testing.B) {
	for _, n := range []int{2, 200, 2000} {
		for _, cached := range []bool{false, true} {
			b.Run(fmt.Sprintf("messages=%d/wirecache=%v", n, cached), func(b *testing.B) {
				var cache *respWireCache
				if cached {
					cache = newRespWireCache(WireCacheBytesDefault)
				}
				hist := wiretest.History(n, "openai", "openai-responses", "gpt-5-mini")
				msgs := append(hist[:n:n], message.User("", 2))
				m := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", MaxTokens: 16384, Input: []string{"text"}}
				req := &provider.Request{Model: m, SystemPrompt: "You are a helpful assistant.", Messages: msgs, SessionID: "s1",
					Tools: []provider.Tool{{Name: "read", Description: "Read a file", Parameters: map[string]any{"type": "object"}}}}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					msgs[n] = message.User(fmt.Sprintf("and now %d?", i), 2)
					if _, err := buildResponsesRequest(req, cache); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
