package bedrock

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/lanefleet/lanefleet/internal/bedrocktest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// TestConcurrentCalls: calls at once on one client, with the chain's key
// and a profile's, share its cached endpoint, auth options and clock skew
// safely (run with -race), every request signed as its call says.
func TestConcurrentCalls(t *testing.T) {
	const akidA, akidB = "AKIAIOSFODNN7EXAMPLE", "AKIAI44QH8DHBEXAMPLE"
	const secA, secB = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
	srv := bedrocktest.New(t, map[string]string{akidA: secA, akidB: secB}, func(int, bedrocktest.Seen) bedrocktest.Reply {
		return bedrocktest.NewFrames().Start().Text(0, "ok").Stop("end_turn", map[string]any{"inputTokens": 2, "outputTokens": 1, "totalTokens": 3})
	})
	a := New(Config{Load: func(context.Context) (aws.Config, error) {
		return aws.Config{Region: "us-west-2", Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(akidA, secA, ""))}, nil
	}})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &provider.Request{Model: provider.Model{ID: "amazon.nova-lite-v1:0", API: "bedrock-converse-stream", BaseURL: srv.URL},
				Messages: []message.Message{message.User("hi", 1)}}
			if i%2 == 1 {
				req.APIKey = provider.Secret(akidB + ":" + secB)
			}
			if _, err := a.Stream(t.Context(), req, func(provider.Event) {}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := map[string]int{}
	for _, r := range srv.Requests(t) {
		n[r.Signer]++
	}
	if n[akidA] != 8 || n[akidB] != 8 {
		t.Errorf("signers %v", n)
	}
}
