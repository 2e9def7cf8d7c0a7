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
	Build: wiretest.Whole(buildChatRequest),
	New:   newWireCache,
	Model: provider.Model{ID: "gpt-4o-mini", Provider: "openai", API: "openai-completions", Input: []string{"text", "image"}},
}

// TestWireCacheBodies: see wiretest.Wire.Steps; here also a user message
// no longer plain text, images, prompt-cache marks and Mistral's shape.
func TestWireCacheBodies(t *testing.T) {
	t.Parallel()
	gpt := provider.Model{ID: "gpt-4o-mini", Provider: "openai", API: "openai-completions", MaxTokens: 1000, Input: []string{"text", "image"}}
	claude := provider.Model{ID: "anthropic/claude-sonnet-4", Provider: "openrouter", API: "openai-completions", BaseURL: "https://openrouter.ai/api/v1", Input: []string{"text", "image"}}
	mistral := provider.Model{ID: "mistral-large", Provider: "mistral", API: "openai-completions", BaseURL: "https://api.mistral.ai/v1"}
	chatWire.Steps(t, gpt, func(h []message.Message) []wiretest.Step {
		withImage := append(slices.Clone(h[:20]), message.Message{Role: message.RoleUser, Timestamp: 5,
			Content: message.BlocksOf(message.Text("look"), message.Image("image/png", "iVBORw0KGgo="))})
		return []wiretest.Step{
			{"a user message no longer plain", gpt, "sys", h[:40], true, func() { h[16].Content = message.BlocksOf(h[16].Content.Blocks...) }},
			{"image", gpt, "sys", withImage, true, nil},
			{"prompt-cache marks (OpenRouter Anthropic)", claude, "sys", h[:21], true, nil},
			{"next turn there", claude, "sys", h[:25], true, nil},
			{"mistral's shape", mistral, "", h[:20], true, nil},
		}
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

// TestWireCacheAppends: see wiretest.Wire.Appends; the requests that
// repeat the last one's messages take their wire messages whole
// (wirecache.Forms.Skip), and the bodies are still the whole conversion's.
func TestWireCacheAppends(t *testing.T) {
	t.Parallel()
	cache := chatWire.Appends(t, chatWire.Model,
		provider.Model{ID: "anthropic/claude-sonnet-4", Provider: "openrouter", API: "openai-completions", BaseURL: "https://openrouter.ai/api/v1", Input: []string{"text", "image"}},
		provider.Model{ID: "mistral-large", Provider: "mistral", API: "openai-completions", BaseURL: "https://api.mistral.ai/v1"})
	if cache.Skipped.Load() == 0 {
		t.Error("no request took the last one's wire messages whole")
	}
}

// TestWireCacheSkipCacheControl: a session on a server that takes
// prompt-cache breakpoints (OpenRouter with an Anthropic model) takes the
// last request's wire messages whole too, short of the one the last
// request marked (addCacheControl Unmarks it), and every body is still
// the whole conversion's. Before, such a session converted every
// message of every request (nothing skipped).
func TestWireCacheSkipCacheControl(t *testing.T) {
	t.Parallel()
	cache := chatWire.AppendsFrom(t, 7, 300,
		provider.Model{ID: "anthropic/claude-sonnet-4", Provider: "openrouter", API: "openai-completions", BaseURL: "https://openrouter.ai/api/v1", Input: []string{"text", "image"}})
	if cache.Skipped.Load() == 0 {
		t.Error("no request took the last one's wire messages whole")
	}
}

// TestWireCacheSkipToolRun: a run of tool results with images goes on in
// the next request (the turn's next result appended to it): the images'
// user message goes after the whole run, so the request takes the last
// one's wire messages whole only up to the run's start, and every body is
// the whole conversion's. It fails when Skip may stop inside a run.
func TestWireCacheSkipToolRun(t *testing.T) {
	t.Parallel()
	cache := newWireCache(0)
	hist := make([]message.Message, 0, 16)
	result := func(id string) message.Message {
		return message.Message{Role: message.RoleToolResult, ToolCallID: id, ToolName: "shot",
			Content: message.BlocksOf(message.Text("screenshot "+id), message.Image("image/png", "aGVsbG8="))}
	}
	call := message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "openai", API: "openai-completions", Model: "gpt-4o-mini",
		Content: message.BlocksOf(message.Block{Type: message.BlockToolCall, ID: "c1", Name: "shot", Arguments: map[string]any{}},
			message.Block{Type: message.BlockToolCall, ID: "c2", Name: "shot", Arguments: map[string]any{}})}
	for _, add := range [][]message.Message{
		{message.User("hello", 1), {Role: message.RoleAssistant, StopReason: message.StopStop, Provider: "openai", API: "openai-completions", Model: "gpt-4o-mini", Content: message.BlocksOf(message.Text("hi"))}},
		{message.User("take two", 2), call, result("c1")},
		{result("c2")},
		{message.User("thanks", 3)},
	} {
		hist = append(hist, add...)
		chatWire.Same(t, fmt.Sprintf("after %d messages", len(hist)), &provider.Request{Model: chatWire.Model, SystemPrompt: "sys", Messages: hist, SessionID: "s", Immutable: len(hist) - len(add)}, cache)
	}
	if cache.Skipped.Load() == 0 {
		t.Error("no request took the last one's wire messages whole")
	}
}

// TestWireCacheSkipClearsPast: a request that takes the last one's wire
// messages whole (Skip) and is shorter than it (the turn's tool round
// left out) leaves nothing of the last one's past its own length in the
// arrays the session keeps.
func TestWireCacheSkipClearsPast(t *testing.T) {
	t.Parallel()
	cache := newWireCache(0)
	h := chatWire.History(200)
	hist := slices.Grow(h[:100], 200)
	build := func(msgs []message.Message, immutable int) {
		t.Helper()
		chatWire.Same(t, fmt.Sprintf("after %d messages", len(msgs)), &provider.Request{Model: chatWire.Model, Messages: msgs, SessionID: "s", Immutable: immutable}, cache)
	}
	for i := range 20 {
		// A turn of a call and its result after a question, then the
		// next turn's request without them.
		turn := append(hist[:len(hist):len(hist)], message.User(fmt.Sprint("q", i), int64(i)))
		turn = append(turn, chatWire.Turn(fmt.Sprint(i), fmt.Sprint("c", i))...)
		build(turn, len(hist))
		hist = append(hist, h[100+2*i:102+2*i]...)
		build(hist, len(hist)-2)
	}
	if n := cache.Take("s").Past(); n != 0 {
		t.Fatalf("%d entries past the request's length still held", n)
	}
	if cache.Skipped.Load() == 0 {
		t.Error("no request took the last one's wire messages whole")
	}
}

// FuzzWireCacheAppends: see wiretest.Wire.FuzzAppends.
func FuzzWireCacheAppends(f *testing.F) {
	chatWire.FuzzAppends(f, chatWire.Model,
		provider.Model{ID: "anthropic/claude-sonnet-4", Provider: "openrouter", API: "openai-completions", BaseURL: "https://openrouter.ai/api/v1", Input: []string{"text", "image"}})
}

// TestWireCacheInFlight: TestRespWireCacheInFlight for Chat Completions.
func TestWireCacheInFlight(t *testing.T) {
	t.Parallel()
	w := inFlight(chatWire, buildChatRequest)
	mistral := provider.Model{ID: "mistral-large", Provider: "mistral", API: "openai-completions", BaseURL: "https://api.mistral.ai/v1"}
	w.Steps(t, w.Model, func([]message.Message) []wiretest.Step { return nil })
	w.RandomEdits(t, w.Model, mistral)
	w.Appends(t, w.Model, mistral)
	w.Concurrent(t, w.Model, w.History(60))
}
