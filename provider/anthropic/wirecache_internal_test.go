package anthropic

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
	return wiretest.History(n, "anthropic", "anthropic-messages", "claude-sonnet-4-5")
}

// toolTurn is an assistant message calling tools ids and their results.
func toolTurn(ids ...string) []message.Message {
	var calls []message.Block
	var out []message.Message
	for _, id := range ids {
		calls = append(calls, message.ToolCall(id, "read", map[string]any{"path": id}))
	}
	out = append(out, message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "anthropic",
		Model: "claude-sonnet-4-5", API: "anthropic-messages", Content: message.BlocksOf(calls...)})
	for _, id := range ids {
		out = append(out, message.Message{Role: message.RoleToolResult, ToolCallID: id, ToolName: "read",
			Content: message.BlocksOf(message.Text("result of " + id))})
	}
	return out
}

// TestWireCacheBodies builds the requests of one session's turns with the
// wire cache and without it, through what a session goes through (new
// turns, a growing run of tool results, thinking, a compaction, a
// rollback, a rewritten tool result, another model, the history limit,
// images, a changed system prompt), and requires the same bytes every
// time, and the cached messages reused.
func TestWireCacheBodies(t *testing.T) {
	t.Parallel()
	sonnet := provider.Model{ID: "claude-sonnet-4-5", Provider: "anthropic", API: "anthropic-messages", MaxTokens: 1000, Input: []string{"text", "image"}}
	haiku := provider.Model{ID: "claude-haiku-4-5", Provider: "anthropic", API: "anthropic-messages", Input: []string{"text"}}
	h := history(40)
	// a tool result cut by overflow recovery, in the middle of the history
	cut := slices.Clone(h)
	cut[10].Content = message.BlocksOf(message.Text("[truncated]"))
	other := slices.Clone(h)
	other[13].Provider, other[13].Model = "openai", "gpt-4o"
	thinking := append(slices.Clone(h[:20]), message.Message{Role: message.RoleAssistant, StopReason: message.StopStop,
		Provider: "anthropic", Model: "claude-sonnet-4-5", API: "anthropic-messages",
		Content: message.BlocksOf(message.Thinking("hmm", "sig=="), message.Block{Type: message.BlockThinking, Redacted: true, ThinkingSignature: "opaque"},
			message.Thinking("unsigned", ""), message.Text("done"), message.ToolCall("call_nil", "ls", nil))})
	withImage := append(slices.Clone(thinking), message.Message{Role: message.RoleUser, Timestamp: 5,
		Content: message.BlocksOf(message.Text("look"), message.Image("image/png", "iVBORw0KGgo="))})
	imgResult := append(slices.Clone(withImage), toolTurn("call_img")...)
	imgResult[len(imgResult)-1].Content = message.BlocksOf(message.Image("image/png", "iVBORw0KGgo="))
	imgResult[len(imgResult)-1].IsError = true
	// a run of tool results that grows between two requests
	run := append(slices.Clone(h[:8]), toolTurn("a", "b", "c")...)
	compacted := append([]message.Message{message.User("The conversation so far: a summary.", 3)}, h[30:]...)
	steps := []struct {
		name    string
		model   provider.Model
		system  string
		msgs    []message.Message
		reusing bool // some messages' JSON must come from the cache
		// change, when set, changes the history in place before the step.
		change func()
	}{
		{"first turn", sonnet, "sys", h[:4], false, nil},
		{"second turn", sonnet, "sys", h[:8], true, nil},
		{"tool loop, one result", sonnet, "sys", run[:10], true, nil},
		{"the run grows", sonnet, "sys", run[:11], true, nil},
		{"the run grows again", sonnet, "sys", run, true, nil},
		{"same again", sonnet, "sys", run, true, nil},
		{"the run shrinks", sonnet, "sys", run[:10], true, nil},
		{"long session", sonnet, "sys", h[:40], true, nil},
		{"same again", sonnet, "sys", h[:40], true, nil},
		{"a text rewritten in place", sonnet, "sys", h[:40], true, func() { h[5].Content.Blocks[0].Text = "Let me look again." }},
		{"a message replaced in place", sonnet, "sys", h[:40], true, func() { h[8] = message.User("another question", 1) }},
		{"tool call arguments replaced", sonnet, "sys", h[:40], true, func() {
			h[13].Content.Blocks[1].Arguments = map[string]any{"path": "other.go"}
		}},
		{"a tool result's id changed", sonnet, "sys", h[:40], true, func() { h[14].ToolCallID = "call_x" }},
		{"a tool result became an error", sonnet, "sys", h[:40], true, func() { h[18].IsError = true }},
		{"tool result cut", sonnet, "sys", cut, true, nil},
		{"another model's reply in the history", sonnet, "sys", other, true, nil},
		{"history limit drops the oldest turns", sonnet, "sys", h[12:40], true, nil},
		{"compaction", sonnet, "sys", compacted, true, nil},
		{"rollback", sonnet, "sys", h[:6], true, nil},
		{"thinking", sonnet, "sys", thinking, true, nil},
		{"image", sonnet, "sys", withImage, true, nil},
		{"image in a tool result", sonnet, "sys", imgResult, true, nil},
		{"model switch, no images", haiku, "sys", imgResult, true, nil},
		{"system prompt changed", haiku, "other sys", h[:20], true, nil},
		{"no system prompt", sonnet, "", h[:24], true, nil},
		{"empty", sonnet, "", nil, false, nil},
		{"after empty", sonnet, "", h[:4], false, nil},
	}
	cache := newWireCache(WireCacheBytesDefault)
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		req := &provider.Request{Model: st.model, SystemPrompt: st.system, Messages: st.msgs, SessionID: "s1",
			Tools: []provider.Tool{{Name: "read", Parameters: map[string]any{"type": "object"}}}}
		before := cache.Reused.Load()
		got, _, err := buildRequest(req, cache)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		want, _, err := buildRequest(req, nil)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: cached body differs:\n got %s\nwant %s", st.name, got, want)
		}
		if reused := cache.Reused.Load() - before; (reused > 0) != st.reusing {
			t.Errorf("%s: %d messages reused, want reuse %v", st.name, reused, st.reusing)
		}
	}
	if n := cache.Reused.Load(); n < 100 {
		t.Errorf("only %d messages reused over the session", n)
	}
}

// TestWireCacheRandomEdits builds a session's requests through random
// edits of its history (turns added, messages dropped, replaced, cut and
// rewritten in place, runs of tool results grown, models switched), with
// the cache and without it: the bodies are the same, byte for byte.
func TestWireCacheRandomEdits(t *testing.T) {
	t.Parallel()
	models := []provider.Model{
		{ID: "claude-sonnet-4-5", Provider: "anthropic", API: "anthropic-messages", Input: []string{"text", "image"}},
		{ID: "claude-haiku-4-5", Provider: "anthropic", API: "anthropic-messages", Input: []string{"text"}},
	}
	cache := newWireCache(WireCacheBytesDefault)
	seed := uint64(1)
	rnd := func(n int) int { // a fixed sequence: the failing step can be replayed
		seed = seed*6364136223846793005 + 1442695040888963407
		return int((seed >> 33) % uint64(n))
	}
	var hist []message.Message
	m := models[0]
	for step := range 400 {
		switch rnd(9) {
		case 0, 1, 2:
			hist = append(hist, history(4+rnd(4))...)
		case 3:
			ids := []string{fmt.Sprint("t", step)}
			for range rnd(3) {
				ids = append(ids, fmt.Sprint("t", step, "_", len(ids)))
			}
			hist = append(hist, toolTurn(ids...)...)
		case 4: // drop the front (history limit, compaction)
			if len(hist) > 0 {
				hist = append([]message.Message{message.User("summary", 9)}, hist[rnd(len(hist)):]...)
			}
		case 5: // rollback
			if len(hist) > 0 {
				hist = hist[:rnd(len(hist))]
			}
		case 6: // a message changed in place
			if len(hist) > 0 {
				i := rnd(len(hist))
				if len(hist[i].Content.Blocks) > 0 && hist[i].Content.Blocks[0].Type == message.BlockText {
					hist[i].Content.Blocks[0].Text += " (edited)"
				} else {
					hist[i] = message.User("replaced", 7)
				}
			}
		case 7: // a tool result cut, or an image added to one
			for i := len(hist) - 1; i >= 0; i-- {
				if hist[i].Role == message.RoleToolResult {
					if rnd(2) == 0 {
						hist[i].Content = message.BlocksOf(message.Text("[truncated]"))
					} else {
						hist[i].Content = message.BlocksOf(message.Text("see"), message.Image("image/png", "iVBORw0KGgo="))
					}
					break
				}
			}
		case 8:
			m = models[rnd(len(models))]
		}
		req := &provider.Request{Model: m, SystemPrompt: "sys", Messages: hist, SessionID: "s1"}
		got, _, err := buildRequest(req, cache)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := buildRequest(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d: cached body differs:\n got %s\nwant %s", step, got, want)
		}
	}
	if cache.Reused.Load() < 1000 {
		t.Errorf("only %d messages reused", cache.Reused.Load())
	}
}

// TestWireCacheBounded keeps sessions within the byte budget, dropping the
// least recently used, and keeps none larger than half of it.
func TestWireCacheBounded(t *testing.T) {
	t.Parallel()
	m := provider.Model{ID: "claude-sonnet-4-5", Provider: "anthropic", API: "anthropic-messages"}
	cache := newWireCache(256 << 10)
	for i := range 50 {
		req := &provider.Request{Model: m, Messages: history(40), SessionID: fmt.Sprint("s", i)}
		if _, _, err := buildRequest(req, cache); err != nil {
			t.Fatal(err)
		}
	}
	if cache.Take("s0") != nil {
		t.Error("the least recently used session is still kept")
	}
	if cache.Take("s49") == nil {
		t.Error("the latest session is not kept")
	}
	big := &provider.Request{Model: m, Messages: history(2000), SessionID: "big"}
	if _, _, err := buildRequest(big, cache); err != nil {
		t.Fatal(err)
	}
	if cache.Take("big") != nil {
		t.Error("a session over half the budget is kept")
	}
}

// TestWireCacheConcurrent runs requests of a few sessions at once (run with
// -race): every body is the uncached one.
func TestWireCacheConcurrent(t *testing.T) {
	t.Parallel()
	m := provider.Model{ID: "claude-sonnet-4-5", Provider: "anthropic", API: "anthropic-messages"}
	cache := newWireCache(WireCacheBytesDefault)
	h := history(60)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 30 {
				req := &provider.Request{Model: m, Messages: h[:1+(i*7+g)%60], SessionID: fmt.Sprint("s", g%3)}
				got, _, err := buildRequest(req, cache)
				if err != nil {
					t.Error(err)
					return
				}
				if want, _, _ := buildRequest(req, nil); !bytes.Equal(got, want) {
					t.Errorf("session %d turn %d: cached body differs", g%3, i)
					return
				}
			}
		})
	}
	wg.Wait()
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
