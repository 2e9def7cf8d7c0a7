package registry_test

import (
	"testing"

	"github.com/lanefleet/lanefleet/provider/registry"
)

// TestAnthropicOAuthToken: with only ANTHROPIC_OAUTH_TOKEN (a Claude
// subscription's setup token) set, the default model is Anthropic's and
// its calls carry the token as a bearer with the OAuth beta, not as
// x-api-key.
func TestAnthropicOAuthToken(t *testing.T) {
	t.Parallel()
	srv, got := speaking(t, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-6\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"+
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"+
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n"+
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	res := registry.NewResolver(registry.ResolverConfig{Env: envOf(map[string]string{"ANTHROPIC_OAUTH_TOKEN": "sk-ant-oat01-abc", "ANTHROPIC_BASE_URL": srv.URL})})
	streamsDefault(t, res, "anthropic/claude-sonnet-4-6", "")
	got.mu.Lock()
	defer got.mu.Unlock()
	if got.header.Get("Authorization") != "Bearer sk-ant-oat01-abc" || got.header.Get("X-Api-Key") != "" || got.header.Get("Anthropic-Beta") == "" {
		t.Errorf("headers %v", got.header)
	}
}
