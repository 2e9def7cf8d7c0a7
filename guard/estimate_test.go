package guard

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// TestEstimateCharsJSON: tool-call arguments and details count as long as
// JavaScript's JSON.stringify writes them, which keeps U+2028/U+2029 (and
// "<>&") as they are; Go's encoding/json writes U+2028 as six characters.
func TestEstimateCharsJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		m    message.Message
		want int
	}{
		{"arguments", message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(
			message.ToolCall("c1", "write", map[string]any{"a": "\u2028<&>"}))}, len(`{"a":"`) + 4 + len(`"}`)},
		{"no arguments", message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(
			message.ToolCall("c1", "ls", nil))}, 2},
		// Tool results count double, details included.
		{"details", message.Message{Role: message.RoleToolResult, ToolCallID: "c1", Content: message.BlocksOf(message.Text("ok")),
			Details: map[string]any{"path": "\u2029"}}, 2 * (2 + len(`{"path":"`) + 1 + len(`"}`))},
	}
	for _, tt := range tests {
		if got := EstimateChars(tt.m); got != tt.want {
			t.Errorf("%s: EstimateChars = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// BenchmarkJSONLen: the length of typical tool-call arguments through the
// module's JSON.stringify emulation, against encoding/json (the baseline
// it replaced).
func BenchmarkJSONLen(b *testing.B) {
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"small", map[string]any{"path": "src/internal/server/handler.go", "offset": 120.0, "limit": 200.0}},
		{"1.5KB", map[string]any{"path": "main.go", "content": strings.Repeat("func main() { fmt.Println(\"hello\") }\n", 40)}},
	} {
		b.Run(tc.name+"/encoding_json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetEscapeHTML(false)
				_ = enc.Encode(tc.args)
				_ = ecmatext.Len(strings.TrimSuffix(buf.String(), "\n"))
			}
		})
		b.Run(tc.name+"/ecmatext", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = jsonLen(tc.args)
			}
		})
	}
}
