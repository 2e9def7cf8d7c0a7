package bedrock_test

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/bedrocktest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
)

// TestTraceSeesResponses: Bedrock's responses reach the call's
// provider.Trace like the HTTP adapters' (the fleet's rate limits read
// them): a throttle's status and Retry-After, which leave no room until
// then, and a stream's 200.
func TestTraceSeesResponses(t *testing.T) {
	t.Parallel()
	throttle := bedrocktest.ErrorReply(429, "ThrottlingException", "Too many tokens, please wait before trying again.")
	throttle.Header = map[string]string{"Retry-After": "7"}
	srv := bedrocktest.New(t, map[string]string{akid: secret}, func(n int, _ bedrocktest.Seen) bedrocktest.Reply {
		if n == 0 {
			return throttle
		}
		return bedrocktest.NewFrames().Start().Text(0, "ok").Stop("end_turn", map[string]any{"inputTokens": 1, "outputTokens": 1, "totalTokens": 2})
	})
	type seen struct {
		status int
		room   failover.RateRoom
		ok     bool
	}
	var got []seen
	now := time.Now()
	ctx := provider.WithTrace(t.Context(), &provider.Trace{Response: func(status int, header func(string) string) {
		room, ok := failover.RateHeaders(status, header, now)
		got = append(got, seen{status, room, ok})
	}})
	req := &provider.Request{Model: model(srv.URL, sonnet), Messages: []message.Message{message.User("hi", 1)}}
	a := adapter()
	if _, err := a.Stream(ctx, req, nil); provider.ReasonOf(err) != provider.ReasonRateLimit {
		t.Fatalf("first call: %v", err)
	}
	if _, err := a.Stream(ctx, req, nil); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].status != 429 || !got[0].ok || got[0].room.Requests != 0 || got[0].room.Reset != 7*time.Second || got[1].status != 200 {
		t.Errorf("traced %+v", got)
	}
}
