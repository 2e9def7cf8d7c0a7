package bedrock

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/lanefleet/lanefleet/internal/bedrocktest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// rotatingKeys hands out key A expiring in 8 minutes, then key B; the
// second retrieval waits for gate.
type rotatingKeys struct {
	n    int
	gate chan struct{}
}

func (r *rotatingKeys) Retrieve(ctx context.Context) (aws.Credentials, error) {
	r.n++
	if r.n == 1 {
		return aws.Credentials{AccessKeyID: "AKIAAAAAAAAAAAAAAAAA", SecretAccessKey: "secretAsecretAsecretA", CanExpire: true, Expires: time.Now().Add(8 * time.Minute)}, nil
	}
	select {
	case <-r.gate:
	case <-ctx.Done():
		return aws.Credentials{}, ctx.Err()
	}
	return aws.Credentials{AccessKeyID: "AKIABBBBBBBBBBBBBBBB", SecretAccessKey: "secretBsecretBsecretB", CanExpire: true, Expires: time.Now().Add(time.Hour)}, nil
}

// TestCredentialsRefreshedAhead: credentials from the chain that expire
// within AheadWindow are refreshed in the background: the call that finds
// them signs with them without waiting for the refresh (which is held
// until the call is done), and the calls after it sign with the new ones.
// (With only the SDK's cache, whose window is 5 minutes, the third call
// still signed with the old key.)
func TestCredentialsRefreshedAhead(t *testing.T) {
	srv := bedrocktest.New(t, map[string]string{"AKIAAAAAAAAAAAAAAAAA": "secretAsecretAsecretA", "AKIABBBBBBBBBBBBBBBB": "secretBsecretBsecretB"},
		func(int, bedrocktest.Seen) bedrocktest.Reply {
			return bedrocktest.NewFrames().Start().Text(0, "ok").Stop("end_turn", map[string]any{"inputTokens": 2, "outputTokens": 1, "totalTokens": 3})
		})
	keys := &rotatingKeys{gate: make(chan struct{})}
	a := New(Config{Load: LoadFromEnv(nil)})
	a.cfg.Load = func(context.Context) (aws.Config, error) {
		return aws.Config{Region: "us-west-2", Credentials: aws.NewCredentialsCache(keys, func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = RefreshWindow })}, nil
	}
	req := &provider.Request{Model: provider.Model{ID: "amazon.nova-lite-v1:0", API: "bedrock-converse-stream", BaseURL: srv.URL},
		Messages: []message.Message{message.User("hi", 1)}}
	for i := range 2 {
		if _, err := a.Stream(t.Context(), req, func(provider.Event) {}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	close(keys.gate)
	a.client.opts.Credentials.(*aheadCredentials).wg.Wait()
	if _, err := a.Stream(t.Context(), req, func(provider.Event) {}); err != nil {
		t.Fatal(err)
	}
	var signers []string
	for _, r := range srv.Requests(t) {
		signers = append(signers, r.Signer)
	}
	if len(signers) != 3 || signers[0] != "AKIAAAAAAAAAAAAAAAAA" || signers[1] != "AKIAAAAAAAAAAAAAAAAA" || signers[2] != "AKIABBBBBBBBBBBBBBBB" {
		t.Errorf("signed by %v", signers)
	}
}

// sameKeys hands out the same key, expiring at one time, on every call:
// a provider that rotates late.
type sameKeys struct {
	n       int
	expires time.Time
}

func (s *sameKeys) Retrieve(context.Context) (aws.Credentials, error) {
	s.n++
	return aws.Credentials{AccessKeyID: "AKIAAAAAAAAAAAAAAAAA", SecretAccessKey: "secretAsecretAsecretA", CanExpire: true, Expires: s.expires}, nil
}

// TestUnchangedCredentialsBackOff: when background refreshes keep bringing
// the same credentials, each doubles the space before the next (1 m,
// 2 m, 4 m, 4 m …), so nine minutes inside the window fetch them 4
// times (at 0, 1, 3 and 7 minutes), not 18; new credentials reset the
// space to 30 s.
func TestUnchangedCredentialsBackOff(t *testing.T) {
	start := time.Now()
	src := &sameKeys{expires: start.Add(AheadWindow)}
	a := &aheadCredentials{src: src}
	if _, err := a.Retrieve(t.Context()); err != nil {
		t.Fatal(err)
	}
	for s := time.Duration(0); s < 9*time.Minute; s += time.Second {
		a.refreshAhead(start.Add(s))
		a.wg.Wait()
	}
	if got := src.n - 1; got != 4 {
		t.Errorf("background refreshes of unchanged credentials in 9 minutes = %d, want 4", got)
	}
	src.expires = start.Add(time.Hour)
	a.refreshAhead(start.Add(20 * time.Minute))
	a.wg.Wait()
	if g := a.retryGap(); g != int64(retryAhead) {
		t.Errorf("space after new credentials = %v, want %v", time.Duration(g), retryAhead)
	}
}
