package openai

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/internal/bytelru"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

// chatWire is the Chat Completions adapter for the wire cache tests every
// adapter passes.
var chatWire = wiretest.Wire[chatMessage, wireConv]{
	Build: buildChatRequest,
	New:   newWireCache,
	Model: provider.Model{ID: "gpt-4o-mini", Provider: "openai", API: "openai-completions", Input: []string{"text", "image"}},
}

// TestWireCacheBodies builds the requests of one session's turns with the
// wire cache and without it, through what a session goes through (new
// turns, a compaction, a rollback, a rewritten tool result, another model,
// the history limit, images, prompt-cache marks, a changed system prompt),
// and requires the same bytes every time, and the cached messages reused.
func TestWireCacheBodies(t *testing.T) {
	t.Parallel()
	gpt := provider.Model{ID: "gpt-4o-mini", Provider: "openai", API: "openai-completions", MaxTokens: 1000, Input: []string{"text", "image"}}
	claude := provider.Model{ID: "anthropic/claude-sonnet-4", Provider: "openrouter", API: "openai-completions", BaseURL: "https://openrouter.ai/api/v1", Input: []string{"text", "image"}}
	mistral := provider.Model{ID: "mistral-large", Provider: "mistral", API: "openai-completions", BaseURL: "https://api.mistral.ai/v1"}
	h := chatWire.History(40)
	// a tool result cut by overflow recovery, in the middle of the history
	cut := slices.Clone(h)
	cut[10].Content = message.BlocksOf(message.Text("[truncated]"))
	other := slices.Clone(h)
	other[13].Provider, other[13].Model = "anthropic", "claude"
	withImage := append(slices.Clone(h[:20]), message.Message{Role: message.RoleUser, Timestamp: 5,
		Content: message.BlocksOf(message.Text("look"), message.Image("image/png", "iVBORw0KGgo="))})
	compacted := append([]message.Message{message.User("The conversation so far: a summary.", 3)}, h[30:]...)
	chatWire.Steps(t, []wiretest.Step{
		{"first turn", gpt, "sys", h[:4], false, nil},
		{"second turn", gpt, "sys", h[:8], true, nil},
		{"long session", gpt, "sys", h[:40], true, nil},
		{"same again", gpt, "sys", h[:40], true, nil},
		{"a text rewritten in place", gpt, "sys", h[:40], true, func() { h[5].Content.Blocks[0].Text = "Let me look again." }},
		{"a message replaced in place", gpt, "sys", h[:40], true, func() { h[8] = message.User("another question", 1) }},
		{"tool call arguments replaced", gpt, "sys", h[:40], true, func() {
			h[13].Content.Blocks[1].Arguments = map[string]any{"path": "other.go"}
		}},
		{"a tool result's id changed", gpt, "sys", h[:40], true, func() { h[14].ToolCallID = "call_x" }},
		{"a user message no longer plain", gpt, "sys", h[:40], true, func() { h[16].Content = message.BlocksOf(h[16].Content.Blocks...) }},
		{"tool result cut", gpt, "sys", cut, true, nil},
		{"another model's reply in the history", gpt, "sys", other, true, nil},
		{"history limit drops the oldest turns", gpt, "sys", h[12:40], true, nil},
		{"compaction", gpt, "sys", compacted, true, nil},
		{"rollback", gpt, "sys", h[:6], true, nil},
		{"image", gpt, "sys", withImage, true, nil},
		{"system prompt changed", gpt, "other sys", h[:20], true, nil},
		{"prompt-cache marks (OpenRouter Anthropic)", claude, "sys", h[:21], true, nil},
		{"next turn there", claude, "sys", h[:25], true, nil},
		{"mistral's shape", mistral, "", h[:20], true, nil},
		{"empty", gpt, "", nil, false, nil},
	})
}

// TestWireCacheRandomEdits: see wiretest.Wire.RandomEdits.
func TestWireCacheRandomEdits(t *testing.T) {
	t.Parallel()
	chatWire.RandomEdits(t, chatWire.Model,
		provider.Model{ID: "anthropic/claude-sonnet-4", Provider: "openrouter", API: "openai-completions", BaseURL: "https://openrouter.ai/api/v1", Input: []string{"text", "image"}},
		provider.Model{ID: "mistral-large", Provider: "mistral", API: "openai-completions", BaseURL: "https://api.mistral.ai/v1"})
}

// TestWireCacheBounded: see wiretest.Wire.Bounded.
func TestWireCacheBounded(t *testing.T) {
	t.Parallel()
	chatWire.Bounded(t)
}

// TestWireCacheConcurrent: see wiretest.Wire.Concurrent.
func TestWireCacheConcurrent(t *testing.T) {
	t.Parallel()
	chatWire.Concurrent(t, chatWire.Model, chatWire.History(60))
}

// TestChatMessageEqualCoversFields fails when chatMessage or chatPart gains
// a field: equal must compare it, or the cache would reuse stale JSON.
func TestChatMessageEqualCoversFields(t *testing.T) {
	t.Parallel()
	if n := reflect.TypeFor[chatMessage]().NumField(); n != 9 {
		t.Errorf("chatMessage has %d fields; update chatMessage.equal and this count", n)
	}
	if n := reflect.TypeFor[chatPart]().NumField(); n != 4 {
		t.Errorf("chatPart has %d fields; update chatPart.equal and this count", n)
	}
	base := chatMessage{Role: "assistant", Content: "x", ToolCalls: []chatToolCall{{ID: "a"}}}
	for i, mod := range []func(*chatMessage){
		func(m *chatMessage) { m.Role = "user" },
		func(m *chatMessage) { m.Content = "y" },
		func(m *chatMessage) { m.Content = []chatPart{{Type: "text", Text: "x"}} },
		func(m *chatMessage) { m.Name = "n" },
		func(m *chatMessage) { m.ToolCallID = "c" },
		func(m *chatMessage) { m.ToolCalls = []chatToolCall{{ID: "b"}} },
		func(m *chatMessage) { m.ReasoningDetails = []json.RawMessage{json.RawMessage(`{}`)} },
		func(m *chatMessage) { m.ReasoningContent = "r" },
		func(m *chatMessage) { m.Reasoning = "r" },
		func(m *chatMessage) { m.ReasoningText = "r" },
	} {
		m := base
		mod(&m)
		if base.equal(&m) || m.equal(&base) {
			t.Errorf("change %d not seen", i)
		}
	}
	p := chatPart{Type: "text", Text: "x"}
	for i, q := range []chatPart{{Type: "image_url", Text: "x"}, {Type: "text", Text: "y"},
		{Type: "text", Text: "x", ImageURL: &chatImageURL{URL: "u"}}, {Type: "text", Text: "x", CacheControl: &cacheControl{Type: "ephemeral"}}} {
		if p.equal(q) || q.equal(p) {
			t.Errorf("part change %d not seen", i)
		}
	}
}

// TestAssistantMessageText joins an assistant's non-blank text blocks.
func TestAssistantMessageText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		texts []string
		want  any
	}{
		{[]string{"a"}, "a"},
		{[]string{"a", "  ", "b"}, "ab"},
		{[]string{"a", "b", "c"}, "abc"},
		{[]string{" ", "b\xff"}, "b"},
	} {
		var blocks []message.Block
		for _, s := range tc.texts {
			blocks = append(blocks, message.Text(s))
		}
		cm, ok := assistantMessage(&message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(blocks...)})
		if !ok || cm.Content != tc.want {
			t.Errorf("%q: got %#v (%v), want %q", tc.texts, cm.Content, ok, tc.want)
		}
	}
	if _, ok := assistantMessage(&message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(message.Text(" "))}); ok {
		t.Error("a blank reply is sent")
	}
}

// TestWireCacheEmptySessionsBounded counts even a session of no messages:
// many of them cannot grow the cache without bound.
func TestWireCacheEmptySessionsBounded(t *testing.T) {
	t.Parallel()
	m := provider.Model{ID: "gpt-4o-mini", Provider: "openai", API: "openai-completions"}
	cache := newWireCache(16 << 10)
	for i := range 1000 {
		if _, err := buildChatRequest(&provider.Request{Model: m, SessionID: fmt.Sprint("s", i)}, cache); err != nil {
			t.Fatal(err)
		}
	}
	kept := 0
	for i := range 1000 {
		if cache.Take(fmt.Sprint("s", i)) != nil {
			kept++
		}
	}
	if kept == 0 || kept > 16<<10/bytelru.EntryOverhead {
		t.Errorf("%d empty sessions kept in 16 KiB", kept)
	}
}
