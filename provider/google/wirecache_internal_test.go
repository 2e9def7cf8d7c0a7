package google

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

func history(n int) []message.Message {
	return wiretest.History(n, "google", "google-generative-ai", "gemini-2.5-flash")
}

// toolTurn is an assistant message calling tools ids and their results.
func toolTurn(ids ...string) []message.Message {
	var calls []message.Block
	var out []message.Message
	for _, id := range ids {
		calls = append(calls, message.ToolCall(id, "read", map[string]any{"path": id}))
	}
	out = append(out, message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "google",
		Model: "gemini-2.5-flash", API: "google-generative-ai", Content: message.BlocksOf(calls...)})
	for _, id := range ids {
		out = append(out, message.Message{Role: message.RoleToolResult, ToolCallID: id, ToolName: "read",
			Content: message.BlocksOf(message.Text("result of " + id))})
	}
	return out
}

var (
	flash  = provider.Model{ID: "gemini-2.5-flash", Provider: "google", API: "google-generative-ai", MaxTokens: 1000, Input: []string{"text", "image"}}
	gem3   = provider.Model{ID: "gemini-3-pro-preview", Provider: "google", API: "google-generative-ai", Input: []string{"text", "image"}}
	claude = provider.Model{ID: "claude-sonnet-4-5", Provider: "google-vertex", API: "google-generative-ai"}
)

// TestWireCacheBodies builds the requests of one session's turns with the
// wire cache and without it, through what a session goes through, and
// requires the same bytes every time, and the cached contents reused.
func TestWireCacheBodies(t *testing.T) {
	t.Parallel()
	h := history(40)
	cut := slices.Clone(h)
	cut[10].Content = message.BlocksOf(message.Text("[truncated]"))
	other := slices.Clone(h)
	other[13].Provider, other[13].Model = "openai", "gpt-4o"
	thinking := append(slices.Clone(h[:20]), message.Message{Role: message.RoleAssistant, StopReason: message.StopStop,
		Provider: "google", Model: "gemini-2.5-flash", API: "google-generative-ai",
		Content: message.BlocksOf(message.Thinking("hmm", "c2lnbmF0dXJl"), message.Block{Type: message.BlockText, Text: " ", TextSignature: "c2ln"},
			message.Text("done"), message.ToolCall("call_nil", "ls", nil))})
	imgResult := append(slices.Clone(thinking), toolTurn("call_img", "call_2")...)
	imgResult[len(imgResult)-2].Content = message.BlocksOf(message.Image("image/png", "iVBORw0KGgo="))
	imgResult[len(imgResult)-2].IsError = true
	nameless := append(slices.Clone(h[:8]), toolTurn("n1", "n2")...)
	nameless[len(nameless)-1].ToolName = ""
	run := append(slices.Clone(h[:8]), toolTurn("a", "b", "c")...)
	compacted := append([]message.Message{message.User("The conversation so far: a summary.", 3)}, h[30:]...)
	steps := []struct {
		name    string
		model   provider.Model
		msgs    []message.Message
		reusing bool
		change  func()
	}{
		{"first turn", flash, h[:4], false, nil},
		{"second turn", flash, h[:8], true, nil},
		{"tool loop, one result", flash, run[:10], true, nil},
		{"the run grows", flash, run[:11], true, nil},
		{"the run grows again", flash, run, true, nil},
		{"same again", flash, run, true, nil},
		{"the run shrinks", flash, run[:10], true, nil},
		{"a result without a tool name", flash, nameless, true, nil},
		{"again", flash, nameless, true, nil},
		{"its call renamed", flash, nameless, true, func() { nameless[8].Content.Blocks[1].Name = "write" }},
		{"the history limit drops its call", flash, nameless[9:], false, nil},
		{"long session", flash, h[:40], false, nil},
		{"a text rewritten in place", flash, h[:40], true, func() { h[5].Content.Blocks[0].Text = "Let me look again." }},
		{"a message replaced in place", flash, h[:40], true, func() { h[8] = message.User("another question", 1) }},
		{"tool call arguments replaced", flash, h[:40], true, func() {
			h[13].Content.Blocks[1].Arguments = map[string]any{"path": "other.go"}
		}},
		{"a tool result became an error", flash, h[:40], true, func() { h[18].IsError = true }},
		{"tool result cut", flash, cut, true, nil},
		{"another model's reply in the history", flash, other, true, nil},
		{"history limit drops the oldest turns", flash, h[12:40], true, nil},
		{"compaction", flash, compacted, true, nil},
		{"rollback", flash, h[:6], true, nil},
		{"thinking", flash, thinking, true, nil},
		{"image in a tool result (image turn)", flash, imgResult, true, nil},
		{"again", flash, imgResult, true, nil},
		{"gemini 3 (images in the response)", gem3, imgResult, true, nil},
		{"call ids sent", claude, imgResult, true, nil},
		{"empty", flash, nil, false, nil},
		{"after empty", flash, h[:4], false, nil},
	}
	cache := newWireCache(WireCacheBytesDefault)
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		req := &provider.Request{Model: st.model, SystemPrompt: "sys", Messages: st.msgs, SessionID: "s1",
			Tools: []provider.Tool{{Name: "read", Parameters: map[string]any{"type": "object"}}}}
		before := cache.Reused.Load()
		got, err := buildRequest(req, cache)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		want, err := buildRequest(req, nil)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: cached body differs:\n got %s\nwant %s", st.name, got, want)
		}
		if reused := cache.Reused.Load() - before; (reused > 0) != st.reusing {
			t.Errorf("%s: %d contents reused, want reuse %v", st.name, reused, st.reusing)
		}
	}
}

// TestWireCacheRandomEdits builds a session's requests through random
// edits of its history, with the cache and without it: the bodies are
// the same, byte for byte.
func TestWireCacheRandomEdits(t *testing.T) {
	t.Parallel()
	models := []provider.Model{flash, gem3, claude}
	cache := newWireCache(WireCacheBytesDefault)
	seed := uint64(1)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int((seed >> 33) % uint64(n))
	}
	var hist []message.Message
	m := models[0]
	for step := range 400 {
		switch rnd(10) {
		case 0, 1, 2:
			hist = append(hist, history(4+rnd(4))...)
		case 3:
			ids := []string{fmt.Sprint("t", step)}
			for range rnd(3) {
				ids = append(ids, fmt.Sprint("t", step, "_", len(ids)))
			}
			hist = append(hist, toolTurn(ids...)...)
		case 4: // compaction, or the history limit
			if len(hist) > 0 && rnd(2) == 0 {
				hist = append([]message.Message{message.User("summary", 9)}, hist[rnd(len(hist)):]...)
			} else if len(hist) > 0 {
				hist = hist[rnd(len(hist)):]
			}
		case 5:
			if len(hist) > 0 {
				hist = hist[:rnd(len(hist))]
			}
		case 6:
			if len(hist) > 0 {
				i := rnd(len(hist))
				if len(hist[i].Content.Blocks) > 0 && hist[i].Content.Blocks[0].Type == message.BlockText {
					hist[i].Content.Blocks[0].Text += " (edited)"
				} else {
					hist[i] = message.User("replaced", 7)
				}
			}
		case 7:
			for i := len(hist) - 1; i >= 0; i-- {
				if hist[i].Role == message.RoleToolResult {
					switch rnd(3) {
					case 0:
						hist[i].Content = message.BlocksOf(message.Text("[truncated]"))
					case 1:
						hist[i].Content = message.BlocksOf(message.Text("see"), message.Image("image/png", "iVBORw0KGgo="))
					case 2:
						hist[i].ToolName = ""
					}
					break
				}
			}
		case 8:
			m = models[rnd(len(models))]
		case 9: // a call renamed in place (its nameless results follow)
			for i := len(hist) - 1; i >= 0; i-- {
				if bs := hist[i].Content.Blocks; hist[i].Role == message.RoleAssistant && len(bs) > 0 && bs[len(bs)-1].Type == message.BlockToolCall {
					bs[len(bs)-1].Name += "x"
					break
				}
			}
		}
		req := &provider.Request{Model: m, SystemPrompt: "sys", Messages: hist, SessionID: "s1"}
		got, err := buildRequest(req, cache)
		if err != nil {
			t.Fatal(err)
		}
		want, err := buildRequest(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d: cached body differs:\n got %s\nwant %s", step, got, want)
		}
	}
	if cache.Reused.Load() < 1000 {
		t.Errorf("only %d contents reused", cache.Reused.Load())
	}
}

// TestWireCacheConcurrent runs requests of a few sessions at once (run with
// -race): every body is the uncached one.
func TestWireCacheConcurrent(t *testing.T) {
	t.Parallel()
	cache := newWireCache(WireCacheBytesDefault)
	h := history(60)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 30 {
				req := &provider.Request{Model: flash, Messages: h[:1+(i*7+g)%60], SessionID: fmt.Sprint("s", g%3)}
				got, err := buildRequest(req, cache)
				if err != nil {
					t.Error(err)
					return
				}
				if want, _ := buildRequest(req, nil); !bytes.Equal(got, want) {
					t.Errorf("session %d turn %d: cached body differs", g%3, i)
					return
				}
			}
		})
	}
	wg.Wait()
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
