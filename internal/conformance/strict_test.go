package conformance

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// TestStrictRefusesUnknownKeys: a key the harness's struct does not know
// is an error, not a key silently left unplayed.
func TestStrictRefusesUnknownKeys(t *testing.T) {
	t.Parallel()
	var v struct {
		A int `json:"a"`
	}
	if err := strict([]byte(`{"a":1}`), &v); err != nil || v.A != 1 {
		t.Fatalf("known key: %v %+v", err, v)
	}
	if err := strict([]byte(`{"a":1,"heartbeat":true}`), &v); err == nil || !strings.Contains(err.Error(), "heartbeat") {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestSubset(t *testing.T) {
	t.Parallel()
	got := map[string]any{"stopReason": "tool_calls", "durationMs": 5, "agentMeta": map[string]any{"usage": map[string]any{"input": 3, "output": 4}},
		"pendingToolCalls": []any{map[string]any{"id": "0a1b2c3d4", "name": "f", "arguments": `{"b":1,"a":[1,2]}`, "approval": false}}}
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"the keys present", `{"stopReason":"tool_calls"}`, true},
		{"nested", `{"agentMeta":{"usage":{"input":3}}}`, true},
		{"a number by value", `{"agentMeta":{"usage":{"input":3.0}}}`, true},
		{"a null stands for an absent key", `{"error":null}`, true},
		{"a generated id", `{"pendingToolCalls":[{"id":"<9 lowercase hex chars>"}]}`, true},
		{"a generated id of another length", `{"pendingToolCalls":[{"id":"<8 lowercase hex chars>"}]}`, false},
		{"JSON text in any key order", `{"pendingToolCalls":[{"arguments":"{\"a\":[1,2],\"b\":1}"}]}`, true},
		{"JSON text that differs", `{"pendingToolCalls":[{"arguments":"{\"a\":[2,1],\"b\":1}"}]}`, false},
		{"a value that differs", `{"stopReason":"stop"}`, false},
		{"a key that is missing", `{"aborted":true}`, false},
		{"arrays of another length", `{"pendingToolCalls":[]}`, false},
	} {
		var want any
		if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
			t.Fatal(err)
		}
		if ok, diff := Subset(got, want); ok != tc.ok {
			t.Errorf("%s: ok = %v (%s), want %v", tc.name, ok, diff, tc.ok)
		}
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     message.Usage
		err      bool
	}{
		{"the reference's names", `{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"total":10}`, message.Usage{Input: 1, Output: 2, CacheRead: 3, CacheWrite: 4, TotalTokens: 10}, false},
		{"Anthropic's", `{"input_tokens":1,"output_tokens":2,"cache_read_input_tokens":3,"cache_creation_input_tokens":4}`, message.Usage{Input: 1, Output: 2, CacheRead: 3, CacheWrite: 4}, false},
		{"OpenAI's", `{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":5}}`, message.Usage{Input: 1, Output: 2, TotalTokens: 3, CacheRead: 5}, false},
		{"pi's", `{"inputTokens":1,"outputTokens":2,"totalTokens":3,"cost":{"total":0.5}}`, message.Usage{Input: 1, Output: 2, TotalTokens: 3, Cost: message.Cost{Total: 0.5}}, false},
		{"none", ``, message.Usage{}, false},
		{"an unknown field", `{"input":1,"reasoning":2}`, message.Usage{}, true},
	} {
		got, err := Usage(json.RawMessage(tc.in))
		if (err != nil) != tc.err || !tc.err && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}
