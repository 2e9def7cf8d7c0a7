package registry_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/provider/registry"
)

// TestBedrockDefaultModel: with only AWS configured (a profile, a region
// for an instance role, keys, web identity, a Bedrock API key) the
// default model is Bedrock's; a provider key wins; the Bedrock models run
// only where the AWS chain is configured.
func TestBedrockDefaultModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"AWS_PROFILE": "dev"}, registry.BedrockDefault},
		{map[string]string{"AWS_REGION": "eu-west-1"}, registry.BedrockDefault},
		{map[string]string{"AWS_PROFILE": "dev", "AWS_REGION": "eu-west-1"}, registry.BedrockDefault},
		{map[string]string{"AWS_ACCESS_KEY_ID": "AKIA…", "AWS_SECRET_ACCESS_KEY": "…"}, registry.BedrockDefault},
		{map[string]string{"AWS_BEARER_TOKEN_BEDROCK": "ABSK…"}, registry.BedrockDefault},
		{map[string]string{"AWS_PROFILE": "dev", "ANTHROPIC_API_KEY": "ak"}, "anthropic/claude-sonnet-4-6"},
		{nil, ""},
	} {
		r := registry.NewResolver(registry.ResolverConfig{Env: envOf(tc.env)})
		if got := r.DefaultModel(); got != tc.want {
			t.Errorf("%v: default model %q, want %q", tc.env, got, tc.want)
		}
		if tc.want != registry.BedrockDefault {
			continue
		}
		if _, err := r.Policy(tc.want, nil, nil, nil); err != nil {
			t.Errorf("%v: %v", tc.env, err)
		}
	}
	// Without any AWS variable the Bedrock models do not run here.
	r := registry.NewResolver(registry.ResolverConfig{Env: envOf(map[string]string{"ANTHROPIC_API_KEY": "ak"})})
	_, err := r.Policy(registry.BedrockDefault, nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `no API key for provider "amazon-bedrock"`) || !strings.Contains(err.Error(), "AWS_PROFILE") {
		t.Errorf("policy without AWS: %v", err)
	}
}

// TestBedrockDispatch: BEDROCK_BASE_URL replaces AWS's endpoint, and a
// bedrock/ (amazon-bedrock/) model is called by the Bedrock adapter (SigV4-signed with the
// request's access key pair, its error classified by its exception).
func TestBedrockDispatch(t *testing.T) {
	t.Parallel()
	srv := wiretest.New(t, func(w http.ResponseWriter, _ *http.Request) {
		wiretest.Reply(w, 403, map[string]string{"Content-Type": "application/json",
			"X-Amzn-Errortype": "UnrecognizedClientException:http://internal.amazon.com/coral/com.amazon.coral.service/"},
			[]byte(`{"message":"The security token included in the request is invalid."}`), 0)
	})
	r := registry.FromEnv(envOf(map[string]string{"BEDROCK_BASE_URL": srv.URL, "AWS_REGION": "eu-central-1"}))
	res, p, err := r.ProviderFor("bedrock/eu.anthropic.claude-haiku-4-5-20251001-v1:0")
	if err != nil || res.Warning != "" {
		t.Fatal(err, res.Warning)
	}
	// bedrock/ is amazon-bedrock/, as the run loop names the provider.
	if res.Model.BaseURL != srv.URL || res.Model.Provider != "amazon-bedrock" || res.Model.API != "bedrock-converse-stream" {
		t.Errorf("model %+v", res.Model)
	}
	_, err = p.Stream(t.Context(), &provider.Request{Model: res.Model, Messages: []message.Message{message.User("q", 1)},
		APIKey: "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}, nil)
	if provider.ReasonOf(err) != provider.ReasonAuth || !strings.Contains(err.Error(), "UnrecognizedClientException") {
		t.Fatalf("error %v", err)
	}
	req := srv.Last(t)
	if req.Path != "/model/eu.anthropic.claude-haiku-4-5-20251001-v1:0/converse-stream" ||
		!strings.Contains(req.Header.Get("Authorization"), "Credential=AKIAIOSFODNN7EXAMPLE/") || !strings.Contains(req.Header.Get("Authorization"), "/eu-central-1/bedrock/") {
		t.Errorf("request %s with %q", req.Path, req.Header.Get("Authorization"))
	}
}
