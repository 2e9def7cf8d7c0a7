package google

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// TestNamelessToolResults: a tool result without a tool name is sent with
// the name of the last call of its id before it (none after it), with
// the wire cache and without, as the session grows and as the history
// limit drops the call.
func TestNamelessToolResults(t *testing.T) {
	t.Parallel()
	call := func(id, name string) message.Message {
		return message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: flash.Provider, Model: flash.ID,
			API: flash.API, Content: message.BlocksOf(message.ToolCall(id, name, map[string]any{}))}
	}
	result := func(id string) message.Message {
		return message.Message{Role: message.RoleToolResult, ToolCallID: id, Content: message.BlocksOf(message.Text("ok"))}
	}
	h := []message.Message{
		message.User("go", 1), call("c1", "read"), result("c1"), // 2: read
		call("c1", "write"), result("c1"), // 4: the later call of the id: write
		result("c2"), call("c2", "ls"), // 5: its call comes after it: no name (transform adds a result to the call, named)
		call("c3", "grep"), result("c3"), result("c1"), // 8: grep, 9: write
	}
	// Calls further back than a result's nearest messages.
	far := []message.Message{message.User("go", 1), call("f1", "old"), call("f1", "far"), call("f2", "other")}
	for range 2 * nearCalls {
		far = append(far, message.User("more", 1))
	}
	far = append(far, result("f1"), result("f3"), call("f3", "late"), result("f2"))
	tests := []struct {
		name  string
		msgs  []message.Message
		names []string // of the function responses, in order
	}{
		{"whole", h, []string{"read", "write", "", "ls", "grep", "write"}},
		{"a turn less", h[:7], []string{"read", "write", ""}},
		{"whole again", h, []string{"read", "write", "", "ls", "grep", "write"}},
		{"the first calls dropped", h[4:], []string{"", "", "ls", "grep", ""}},
		{"the first call dropped", h[2:], []string{"", "write", "", "ls", "grep", "write"}},
		{"calls far back", far, []string{"old", "far", "other", "far", "", "other"}}, // the first three: results transform adds to the calls
	}
	cache := newWireCache(WireCacheBytesDefault)
	for _, tt := range tests {
		req := &provider.Request{Model: flash, Messages: tt.msgs, SessionID: "s1"}
		for _, c := range []*wireCache{nil, cache} {
			body, err := buildRequest(req, c)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			var got apiRequest
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			var names []string
			for _, ct := range got.Contents {
				for _, p := range ct.Parts {
					if p.FunctionResponse != nil {
						names = append(names, p.FunctionResponse.Name)
					}
				}
			}
			if !slices.Equal(names, tt.names) {
				t.Errorf("%s (cached %v): names %q, want %q", tt.name, c != nil, names, tt.names)
			}
		}
	}
}
