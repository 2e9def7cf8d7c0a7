package compaction

import (
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sessionfile"
)

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	img := message.Image("image/png", "iVBORw0KGgo=")
	tests := []struct {
		name string
		m    message.Message
		want int
	}{
		{"empty user", message.User("", 0), 0},
		// chars/4, rounded up.
		{"four chars", message.User("abcd", 0), 1},
		{"five chars", message.User("abcde", 0), 2},
		// JavaScript counts UTF-16 code units: é is one, 😀 two.
		{"accented", message.User("éééé", 0), 1},
		{"astral", message.User("😀😀😀", 0), 2},
		// An image counts 4800 characters; non-text blocks nothing else.
		{"user text and image", message.Message{Role: message.RoleUser, Content: message.BlocksOf(message.Text("abcd"), img)}, 1201},
		{"tool result image", message.Message{Role: message.RoleToolResult, Content: message.BlocksOf(img, img)}, 2400},
		// Text, thinking, tool name and JSON.stringify of the arguments.
		{"assistant", message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(
			message.Text("abcd"), message.Thinking("abcdabcd", "sig-not-counted"),
			message.ToolCall("toolu_1", "read", map[string]any{"path": "a.go"}))}, 8}, // 4+8+4+15 = 31
		// Arguments never set encode as {}.
		{"call without arguments", message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(
			message.ToolCall("toolu_1", "ls", nil))}, 1},
		{"custom string", message.Message{Role: sessionfile.RoleCustom, Extra: map[string]any{"content": tok(3)}}, 3},
		{"custom blocks", message.Message{Role: sessionfile.RoleCustom, Extra: map[string]any{"content": []any{
			map[string]any{"type": "text", "text": "abcd"},
			map[string]any{"type": "image", "data": "x", "mimeType": "image/png"}}}}, 1201},
		{"bash", message.Message{Role: RoleBashExecution, Extra: map[string]any{"command": "ls", "output": "a.go\nb.go", "exitCode": int64(0)}}, 3},
		{"compaction summary", message.Message{Role: sessionfile.RoleCompactionSummary, Extra: map[string]any{"summary": tok(7)}}, 7},
		{"branch summary", message.Message{Role: sessionfile.RoleBranchSummary, Extra: map[string]any{"summary": tok(2) + "a"}}, 3},
		{"unknown role", message.Message{Role: "hookMessage", Extra: map[string]any{"content": tok(9)}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := EstimateTokens(tt.m); got != tt.want {
				t.Errorf("EstimateTokens = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestContextTokens(t *testing.T) {
	t.Parallel()
	withUsage := func(stop message.StopReason, u message.Usage) message.Message {
		return message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text(tok(10))), StopReason: stop, Usage: &u}
	}
	at := func(m message.Message, ts int64) message.Message { m.Timestamp = ts; return m }
	summary := message.Message{Role: sessionfile.RoleCompactionSummary, Extra: map[string]any{"summary": tok(50)}}
	tests := []struct {
		name string
		msgs []message.Message
		want int
	}{
		{"nothing", nil, 0},
		{"no usage: all estimated", []message.Message{message.User(tok(5), 0), message.User(tok(6), 0)}, 11},
		{"usage plus what follows", []message.Message{
			message.User(tok(5), 0), withUsage(message.StopStop, message.Usage{TotalTokens: 1000}), message.User(tok(6), 0)}, 1006},
		// Old session files have no totalTokens: the parts are summed.
		{"usage without total", []message.Message{
			withUsage(message.StopToolUse, message.Usage{Input: 10, Output: 20, CacheRead: 300, CacheWrite: 4000})}, 4330},
		// Errored and aborted replies carry no valid usage.
		{"error usage skipped", []message.Message{
			withUsage(message.StopStop, message.Usage{TotalTokens: 1000}), message.User(tok(6), 0),
			withUsage(message.StopError, message.Usage{TotalTokens: 99999})}, 1016},
		{"aborted usage skipped", []message.Message{
			withUsage(message.StopAborted, message.Usage{TotalTokens: 99999})}, 10},
		// sanitize.ZeroStaleUsage leaves all-zero usage behind: no usage.
		{"zero usage", []message.Message{
			message.User(tok(5), 0), withUsage(message.StopStop, message.Usage{})}, 15},
		// A usage reported before the last compaction measured the old,
		// longer context: placed before the summary, or kept after it
		// but not newer.
		{"usage before summary", []message.Message{
			withUsage(message.StopStop, message.Usage{TotalTokens: 150000}), summary, message.User(tok(6), 0)}, 10 + 50 + 6},
		{"kept usage not newer than summary", []message.Message{
			at(summary, 2000), at(withUsage(message.StopStop, message.Usage{TotalTokens: 150000}), 1000), message.User(tok(6), 0)}, 50 + 10 + 6},
		{"usage newer than summary", []message.Message{
			at(summary, 2000), at(withUsage(message.StopStop, message.Usage{TotalTokens: 150000}), 3000), message.User(tok(6), 0)}, 150006},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ContextTokens(tt.msgs); got != tt.want {
				t.Errorf("ContextTokens = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestShouldCompact(t *testing.T) {
	t.Parallel()
	on := DefaultSettings()
	tests := []struct {
		name           string
		tokens, window int
		s              Settings
		want           bool
	}{
		{"below", 100000, 200000, on, false},
		// The threshold is strict: exactly window − reserve does not compact.
		{"at threshold", 200000 - 16384, 200000, on, false},
		{"above", 200000 - 16383, 200000, on, true},
		{"disabled", 199999, 200000, Settings{ReserveTokens: 16384}, false},
		{"zero reserve takes the default", 190000, 200000, Settings{Enabled: true}, true},
		{"custom reserve", 150001, 200000, Settings{Enabled: true, ReserveTokens: 50000}, true},
		{"unknown window", 5, 0, on, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ShouldCompact(tt.tokens, tt.window, tt.s); got != tt.want {
				t.Errorf("ShouldCompact(%d, %d) = %v, want %v", tt.tokens, tt.window, got, tt.want)
			}
		})
	}
}
