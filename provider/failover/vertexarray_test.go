package failover_test

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/failover"
)

// TestVertexArrayBodies: Vertex AI sends a Google error inside a JSON
// array (bodies recorded on Claude quota and Model Garden refusals); the
// message is the inner one, not the array's text.
func TestVertexArrayBodies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		reason provider.Reason
		msg    string
	}{
		{"quota", 429, `[{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude-3-5-sonnet-v2.","status":"RESOURCE_EXHAUSTED"}}]`,
			provider.ReasonRateLimit, "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude-3-5-sonnet-v2."},
		{"pretty, with a newline", 400, "[{\n  \"error\": {\n    \"code\": 400,\n    \"message\": \"The input token count (1189015) exceeds the maximum number of tokens allowed (1048576).\",\n    \"status\": \"INVALID_ARGUMENT\"\n  }\n}\n]\n",
			provider.ReasonContextOverflow, "The input token count (1189015) exceeds the maximum number of tokens allowed (1048576)."},
		// Not an error array: the text stays the message, as for any body
		// that is not an error object.
		{"array of numbers", 500, `[1,2]`, provider.ReasonUnknown, "[1,2]"},
		{"empty array", 500, `[]`, provider.ReasonUnknown, "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := failover.FromHTTP(tt.status, nil, []byte(tt.body), nil, time.Now())
			if e.Reason != tt.reason || e.Message != tt.msg {
				t.Errorf("got %s %q, want %s %q", e.Reason, e.Message, tt.reason, tt.msg)
			}
		})
	}
}
