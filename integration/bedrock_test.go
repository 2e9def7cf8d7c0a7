package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/bedrocktest"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestBedrockThrottleRotatesProfile: a Bedrock model on a fleet whose
// two auth profiles are AWS access key pairs. Bedrock throttles the
// first (a ThrottlingException), so the run rotates to the second and
// the reply streams from it; every request reaches the endpoint
// (BEDROCK_BASE_URL) SigV4-signed, each signature checked with the SDK's
// signer against its own key's secret.
func TestBedrockThrottleRotatesProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	const (
		akA, secA = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
		akB, secB = "AKIAI44QH8DHBEXAMPLE", "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"
		id        = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
	)
	srv := bedrocktest.New(t, map[string]string{akA: secA, akB: secB}, func(_ int, r bedrocktest.Seen) bedrocktest.Reply {
		if r.Signer == akA {
			return bedrocktest.ErrorReply(429, "ThrottlingException", "Too many tokens, please wait before trying again.")
		}
		return bedrocktest.NewFrames().Start().Text(0, "Hello ", "from Bedrock.").
			Stop("end_turn", map[string]any{"inputTokens": 30, "outputTokens": 4, "totalTokens": 34})
	})
	profiles := filepath.Join(t.TempDir(), "auth-profiles.json")
	p := `{"version":1,"profiles":{"bedrock:a":{"type":"api_key","provider":"bedrock","key":"` + akA + ":" + secA + `"},` +
		`"bedrock:b":{"type":"api_key","provider":"bedrock","key":"` + akB + ":" + secB + `"}},"order":{"bedrock":["bedrock:a","bedrock:b"]}}`
	if err := os.WriteFile(profiles, []byte(p), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BEDROCK_BASE_URL": srv.URL, "AWS_REGION": "eu-west-1"}
	nats := natstest.Start(t)
	startMember(t, nats.URL, fleet.Config{WorkerID: "w1", AuthProfiles: profiles, DefaultModel: "bedrock/" + id, Env: func(k string) string { return env[k] }})
	c, _ := lanefleet.New(natstest.Connect(t, nats.URL))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := c.Send(ctx, "bedrock:1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait(ctx)
	if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text != "Hello from Bedrock." {
		t.Fatalf("run: %+v, %v", res, err)
	}
	reqs := srv.Requests(t)
	if len(reqs) != 2 || reqs[0].Signer != akA || reqs[1].Signer != akB {
		t.Fatalf("requests %+v, want one signed by A then one by B", reqs)
	}
	for _, r := range reqs {
		if r.Path != bedrocktest.ModelPath(id) || r.Region != "eu-west-1" {
			t.Errorf("request %s for %s", r.Path, r.Region)
		}
	}
}
