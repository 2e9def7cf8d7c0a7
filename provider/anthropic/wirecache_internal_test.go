package anthropic

import (
	"reflect"
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

// wire is this adapter for the wire cache tests every adapter passes.
var wire = wiretest.Wire[apiMessage, wireConv]{
	Build: func(req *provider.Request, cache *wireCache) ([]byte, error) {
		body, _, err := buildRequest(req, cache, "")
		return body, err
	},
	New:   newWireCache,
	Model: provider.Model{ID: "claude-sonnet-4-5", Provider: "anthropic", API: "anthropic-messages", Input: []string{"text", "image"}},
}

// TestWireCacheBodies: see wiretest.Wire.Steps; here also a growing run
// of tool results, thinking blocks (signed, redacted, unsigned), images
// and a model without image input.
func TestWireCacheBodies(t *testing.T) {
	t.Parallel()
	sonnet := provider.Model{ID: "claude-sonnet-4-5", Provider: "anthropic", API: "anthropic-messages", MaxTokens: 1000, Input: []string{"text", "image"}}
	haiku := provider.Model{ID: "claude-haiku-4-5", Provider: "anthropic", API: "anthropic-messages", Input: []string{"text"}}
	wire.Steps(t, sonnet, func(h []message.Message) []wiretest.Step {
		thinking := append(slices.Clone(h[:20]), message.Message{Role: message.RoleAssistant, StopReason: message.StopStop,
			Provider: "anthropic", Model: "claude-sonnet-4-5", API: "anthropic-messages",
			Content: message.BlocksOf(message.Thinking("hmm", "sig=="), message.Block{Type: message.BlockThinking, Redacted: true, ThinkingSignature: "opaque"},
				message.Thinking("unsigned", ""), message.Text("done"), message.ToolCall("call_nil", "ls", nil))})
		withImage := append(slices.Clone(thinking), message.Message{Role: message.RoleUser, Timestamp: 5,
			Content: message.BlocksOf(message.Text("look"), message.Image("image/png", "iVBORw0KGgo="))})
		imgResult := append(slices.Clone(withImage), wire.Turn("", "call_img")...)
		imgResult[len(imgResult)-1].Content = message.BlocksOf(message.Image("image/png", "iVBORw0KGgo="))
		imgResult[len(imgResult)-1].IsError = true
		// a run of tool results that grows between two requests
		run := append(slices.Clone(h[:8]), wire.Turn("", "a", "b", "c")...)
		return []wiretest.Step{
			{"tool loop, one result", sonnet, "sys", run[:10], true, nil},
			{"the run grows", sonnet, "sys", run[:11], true, nil},
			{"the run grows again", sonnet, "sys", run, true, nil},
			{"same again", sonnet, "sys", run, true, nil},
			{"the run shrinks", sonnet, "sys", run[:10], true, nil},
			{"thinking", sonnet, "sys", thinking, true, nil},
			{"image", sonnet, "sys", withImage, true, nil},
			{"image in a tool result", sonnet, "sys", imgResult, true, nil},
			{"model switch, no images", haiku, "sys", imgResult, true, nil},
		}
	})
}

// TestWireCacheRandomEdits: see wiretest.Wire.RandomEdits.
func TestWireCacheRandomEdits(t *testing.T) {
	t.Parallel()
	wire.RandomEdits(t, wire.Model, provider.Model{ID: "claude-haiku-4-5", Provider: "anthropic", API: "anthropic-messages", Input: []string{"text"}})
}

// TestWireCacheBounded: see wiretest.Wire.Bounded.
func TestWireCacheBounded(t *testing.T) {
	t.Parallel()
	wire.Bounded(t)
}

// TestWireCacheConcurrent: see wiretest.Wire.Concurrent.
func TestWireCacheConcurrent(t *testing.T) {
	t.Parallel()
	wire.Concurrent(t, wire.Model, wire.History(60))
}

// TestAPIMessageEqualCoversFields fails when apiMessage or apiBlock gains
// a field: equal must compare it, or the cache would reuse stale JSON.
func TestAPIMessageEqualCoversFields(t *testing.T) {
	t.Parallel()
	if n := reflect.TypeFor[apiMessage]().NumField(); n != 2 {
		t.Errorf("apiMessage has %d fields; update apiMessage.equal and this count", n)
	}
	if n := reflect.TypeFor[apiBlock]().NumField(); n != 13 {
		t.Errorf("apiBlock has %d fields; update apiBlock.equal and this count", n)
	}
	args := map[string]any{"a": 1}
	base := apiBlock{Type: "text", Text: str("x"), Input: args, Content: "c"}
	for i, mod := range []func(*apiBlock){
		func(b *apiBlock) { b.Type = "thinking" },
		func(b *apiBlock) { b.Text = str("y") },
		func(b *apiBlock) { b.Text = nil },
		func(b *apiBlock) { b.Thinking = str("") },
		func(b *apiBlock) { b.Signature = str("s") },
		func(b *apiBlock) { b.Data = "d" },
		func(b *apiBlock) { b.Source = &apiImage{Type: "base64"} },
		func(b *apiBlock) { b.ID = "i" },
		func(b *apiBlock) { b.Name = "n" },
		func(b *apiBlock) { b.Input = map[string]any{"a": 1} }, // another map: not proven the same
		func(b *apiBlock) { b.Input = nil },
		func(b *apiBlock) { b.ToolUseID = "t" },
		func(b *apiBlock) { b.Content = "d" },
		func(b *apiBlock) { b.Content = []apiBlock{textBlock("c")} },
		func(b *apiBlock) { b.Content = nil },
		func(b *apiBlock) { b.IsError = true },
		func(b *apiBlock) { b.CacheControl = &apiCache{Type: "ephemeral"} },
	} {
		b := base
		mod(&b)
		if base.equal(&b) || b.equal(&base) {
			t.Errorf("block change %d not seen", i)
		}
		x, y := apiMessage{Role: "user", Content: []apiBlock{base}}, apiMessage{Role: "user", Content: []apiBlock{b}}
		if x.equal(&y) {
			t.Errorf("message with block change %d is equal", i)
		}
	}
	same := base
	same.Text = str("x")
	if !base.equal(&same) {
		t.Error("equal blocks (strings behind other pointers) are not equal")
	}
	empty1, empty2 := apiBlock{Type: "tool_use", Input: map[string]any{}}, apiBlock{Type: "tool_use", Input: map[string]any{}}
	if !empty1.equal(&empty2) {
		t.Error("two empty inputs (both omitted) are not equal")
	}
	for i, pair := range [][2]apiMessage{
		{{Role: "user"}, {Role: "assistant"}},
		{{Role: "user"}, {Role: "user", Content: []apiBlock{}}},
		{{Role: "user", Content: []apiBlock{base}}, {Role: "user", Content: []apiBlock{base, base}}},
	} {
		if pair[0].equal(&pair[1]) || pair[1].equal(&pair[0]) {
			t.Errorf("message pair %d is equal", i)
		}
	}
}

// TestWireCacheAppends: see wiretest.Wire.Appends; the requests that
// repeat the last one's messages take their wire messages whole
// (wirecache.Forms.Skip), and the bodies are still the whole conversion's.
func TestWireCacheAppends(t *testing.T) {
	t.Parallel()
	cache := wire.Appends(t, wire.Model, provider.Model{ID: "claude-haiku-4-5", Provider: "anthropic", API: "anthropic-messages", Input: []string{"text"}})
	if cache.Skipped.Load() == 0 {
		t.Error("no request took the last one's wire messages whole")
	}
}

// FuzzWireCacheAppends: see wiretest.Wire.FuzzAppends.
func FuzzWireCacheAppends(f *testing.F) {
	wire.FuzzAppends(f, wire.Model, provider.Model{ID: "claude-haiku-4-5", Provider: "anthropic", API: "anthropic-messages", Input: []string{"text"}})
}
