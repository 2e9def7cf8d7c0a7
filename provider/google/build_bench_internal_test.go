package google

import (
	"fmt"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// BenchmarkBuildRequest: see wiretest.Wire.BenchBuild.
func BenchmarkBuildRequest(b *testing.B) { wire.BenchBuild(b) }

// BenchmarkBuildRequestNameless is BenchBuild's long session turn when
// the tool results do not name their tool (each takes the name of its
// call, in an earlier message; calls=gone: of no call, as when the
// history limit dropped them, which reads the whole history for each):
// its cost should not grow faster than the session.
func BenchmarkBuildRequestNameless(b *testing.B) {
	for _, n := range []int{200, 2000} {
		for _, gone := range []bool{false, true} {
			for _, cached := range []bool{false, true} {
				benchNameless(b, n, gone, cached)
			}
		}
	}
}

// benchNameless runs one case of BenchmarkBuildRequestNameless.
func benchNameless(b *testing.B, n int, gone, cached bool) {
	calls := "found"
	if gone {
		calls = "gone"
	}
	b.Run(fmt.Sprintf("messages=%d/calls=%s/wirecache=%v", n, calls, cached), func(b *testing.B) {
		var cache *wireCache
		if cached {
			cache = newWireCache(WireCacheBytesDefault)
		}
		msgs := append(wire.History(n)[:n:n], message.User("", 2))
		for i := range msgs {
			if msgs[i].Role == message.RoleToolResult {
				msgs[i].ToolName = ""
				if gone {
					msgs[i].ToolCallID += "_gone"
				}
			}
		}
		m := flash
		m.Input = []string{"text"}
		req := &provider.Request{Model: m, SystemPrompt: "You are a helpful assistant.", Messages: msgs, SessionID: "s1"}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			msgs[n] = message.User(fmt.Sprintf("and now %d?", i), 2)
			if _, err := buildRequest(req, cache); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTurns: see wiretest.Wire.BenchTurns.
func BenchmarkTurns(b *testing.B) { wire.BenchTurns(b) }
