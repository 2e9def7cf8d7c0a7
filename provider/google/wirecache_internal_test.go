package google

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

// wire is this adapter for the wire cache tests every adapter passes.
var wire = wiretest.Wire[apiContent, wireConv]{
	Build: buildRequest,
	New:   newWireCache,
	Model: flash,
}

var (
	flash  = provider.Model{ID: "gemini-2.5-flash", Provider: "google", API: "google-generative-ai", MaxTokens: 1000, Input: []string{"text", "image"}}
	gem3   = provider.Model{ID: "gemini-3-pro-preview", Provider: "google", API: "google-generative-ai", Input: []string{"text", "image"}}
	claude = provider.Model{ID: "claude-sonnet-4-5", Provider: "google-vertex", API: "google-generative-ai"}
)

// TestWireCacheBodies: see wiretest.Wire.Steps; here also a growing run
// of tool results, results without a tool name (the name comes from their
// call), thinking and text signatures, images in tool results, Gemini 3
// and a model that is sent call ids.
func TestWireCacheBodies(t *testing.T) {
	t.Parallel()
	wire.Steps(t, flash, func(h []message.Message) []wiretest.Step {
		thinking := append(slices.Clone(h[:20]), message.Message{Role: message.RoleAssistant, StopReason: message.StopStop,
			Provider: "google", Model: "gemini-2.5-flash", API: "google-generative-ai",
			Content: message.BlocksOf(message.Thinking("hmm", "c2lnbmF0dXJl"), message.Block{Type: message.BlockText, Text: " ", TextSignature: "c2ln"},
				message.Text("done"), message.ToolCall("call_nil", "ls", nil))})
		imgResult := append(slices.Clone(thinking), wire.Turn("", "call_img", "call_2")...)
		imgResult[len(imgResult)-2].Content = message.BlocksOf(message.Image("image/png", "iVBORw0KGgo="))
		imgResult[len(imgResult)-2].IsError = true
		nameless := append(slices.Clone(h[:8]), wire.Turn("", "n1", "n2")...)
		nameless[len(nameless)-1].ToolName = ""
		run := append(slices.Clone(h[:8]), wire.Turn("", "a", "b", "c")...)
		return []wiretest.Step{
			{"tool loop, one result", flash, "sys", run[:10], true, nil},
			{"the run grows", flash, "sys", run[:11], true, nil},
			{"the run grows again", flash, "sys", run, true, nil},
			{"same again", flash, "sys", run, true, nil},
			{"the run shrinks", flash, "sys", run[:10], true, nil},
			{"a result without a tool name", flash, "sys", nameless, true, nil},
			{"again", flash, "sys", nameless, true, nil},
			{"its call renamed", flash, "sys", nameless, true, func() { nameless[8].Content.Blocks[1].Name = "write" }},
			{"the history limit drops its call", flash, "sys", nameless[9:], false, nil},
			{"the long session again", flash, "sys", h[:40], false, nil},
			{"thinking", flash, "sys", thinking, true, nil},
			{"image in a tool result (image turn)", flash, "sys", imgResult, true, nil},
			{"again", flash, "sys", imgResult, true, nil},
			{"gemini 3 (images in the response)", gem3, "sys", imgResult, true, nil},
			{"call ids sent", claude, "sys", imgResult, true, nil},
		}
	})
}

// TestWireCacheRandomEdits: see wiretest.Wire.RandomEdits.
func TestWireCacheRandomEdits(t *testing.T) {
	t.Parallel()
	wire.RandomEdits(t, flash, gem3, claude)
}

// TestWireCacheBounded: see wiretest.Wire.Bounded.
func TestWireCacheBounded(t *testing.T) {
	t.Parallel()
	wire.Bounded(t)
}

// TestWireCacheConcurrent: see wiretest.Wire.Concurrent.
func TestWireCacheConcurrent(t *testing.T) {
	t.Parallel()
	wire.Concurrent(t, flash, wire.History(60))
}

// TestAPIContentEqualCoversFields fails when a wire type gains a field:
// equal must compare it, or the cache would reuse stale JSON.
func TestAPIContentEqualCoversFields(t *testing.T) {
	t.Parallel()
	for typ, n := range map[reflect.Type]int{
		reflect.TypeFor[apiContent](): 2, reflect.TypeFor[apiPart](): 6, reflect.TypeFor[apiBlob](): 2,
		reflect.TypeFor[apiFunctionCall](): 3, reflect.TypeFor[apiFunctionResp](): 4,
	} {
		if got := typ.NumField(); got != n {
			t.Errorf("%s has %d fields; update its equal and this count", typ, got)
		}
	}
	args := map[string]any{"a": 1}
	base := apiPart{Text: str("x"), FunctionCall: &apiFunctionCall{Name: "f", Args: args},
		FunctionResponse: &apiFunctionResp{Name: "f", Response: map[string]any{"output": "o"}}}
	for i, mod := range []func(*apiPart){
		func(p *apiPart) { p.Text = str("y") },
		func(p *apiPart) { p.Text = nil },
		func(p *apiPart) { p.Thought = true },
		func(p *apiPart) { p.ThoughtSignature = "s" },
		func(p *apiPart) { p.InlineData = &apiBlob{MimeType: "image/png"} },
		func(p *apiPart) { p.FunctionCall = nil },
		func(p *apiPart) { p.FunctionCall = &apiFunctionCall{ID: "i", Name: "f", Args: args} },
		func(p *apiPart) { p.FunctionCall = &apiFunctionCall{Name: "g", Args: args} },
		func(p *apiPart) { p.FunctionCall = &apiFunctionCall{Name: "f", Args: map[string]any{"a": 1}} },
		func(p *apiPart) { p.FunctionCall = &apiFunctionCall{Name: "f"} },
		func(p *apiPart) { p.FunctionResponse = nil },
		func(p *apiPart) {
			p.FunctionResponse = &apiFunctionResp{ID: "i", Name: "f", Response: map[string]any{"output": "o"}}
		},
		func(p *apiPart) {
			p.FunctionResponse = &apiFunctionResp{Name: "g", Response: map[string]any{"output": "o"}}
		},
		func(p *apiPart) {
			p.FunctionResponse = &apiFunctionResp{Name: "f", Response: map[string]any{"error": "o"}}
		},
		func(p *apiPart) {
			p.FunctionResponse = &apiFunctionResp{Name: "f", Response: map[string]any{"output": "p"}}
		},
		func(p *apiPart) {
			p.FunctionResponse = &apiFunctionResp{Name: "f", Response: map[string]any{"output": "o"}, Parts: []apiPart{{Text: str("i")}}}
		},
	} {
		p := base
		mod(&p)
		if base.equal(&p) || p.equal(&base) {
			t.Errorf("part change %d not seen", i)
		}
	}
	same := apiPart{Text: str("x"), FunctionCall: &apiFunctionCall{Name: "f", Args: args},
		FunctionResponse: &apiFunctionResp{Name: "f", Response: map[string]any{"output": "o"}}}
	if !base.equal(&same) {
		t.Error("equal parts (behind other pointers) are not equal")
	}
	if a, b := (apiContent{Role: "user"}), (apiContent{Role: "user", Parts: []apiPart{}}); a.equal(&b) {
		t.Error("null and empty parts are equal")
	}
}

// TestWireCacheAppends: see wiretest.Wire.Appends; the requests that
// repeat the last one's messages take their contents whole
// (wirecache.Forms.Skip), and the bodies are still the whole conversion's.
func TestWireCacheAppends(t *testing.T) {
	t.Parallel()
	cache := wire.Appends(t, flash, gem3, claude)
	if cache.Skipped.Load() == 0 {
		t.Error("no request took the last one's contents whole")
	}
}

// FuzzWireCacheAppends: see wiretest.Wire.FuzzAppends.
func FuzzWireCacheAppends(f *testing.F) {
	wire.FuzzAppends(f, flash, gem3, claude)
}

// TestWireCacheSkipToolRun: a run of tool results with images goes on in
// the next request (the turn's next result appended to it): the run is
// one content and its images one after it, so the request takes the last
// one's contents whole only up to the run's start, and every body is the
// whole conversion's. A result without a tool name takes it from its
// call, among the messages taken whole. It fails when Skip may stop
// inside a run.
func TestWireCacheSkipToolRun(t *testing.T) {
	t.Parallel()
	cache := newWireCache(0)
	hist := make([]message.Message, 0, 16)
	result := func(id string) message.Message {
		return message.Message{Role: message.RoleToolResult, ToolCallID: id,
			Content: message.BlocksOf(message.Text("screenshot "+id), message.Image("image/png", "aGVsbG8="))}
	}
	call := message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "google", API: "google-generative-ai", Model: flash.ID,
		Content: message.BlocksOf(message.Block{Type: message.BlockToolCall, ID: "c1", Name: "shot", Arguments: map[string]any{}},
			message.Block{Type: message.BlockToolCall, ID: "c2", Name: "shot", Arguments: map[string]any{}})}
	for _, add := range [][]message.Message{
		{message.User("hello", 1), {Role: message.RoleAssistant, StopReason: message.StopStop, Provider: "google", API: "google-generative-ai", Model: flash.ID, Content: message.BlocksOf(message.Text("hi"))}},
		{message.User("take two", 2), call, result("c1")},
		{result("c2")},
		{message.User("thanks", 3)},
	} {
		hist = append(hist, add...)
		wire.Same(t, fmt.Sprintf("after %d messages", len(hist)), &provider.Request{Model: flash, SystemPrompt: "sys", Messages: hist, SessionID: "s", Immutable: len(hist) - len(add)}, cache)
	}
	if cache.Skipped.Load() == 0 {
		t.Error("no request took the last one's contents whole")
	}
}
