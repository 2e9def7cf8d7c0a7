package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

func respHistory(n int) []message.Message {
	return wiretest.History(n, "openai", "openai-responses", "gpt-5-mini")
}

// respTurn is an assistant reply of gpt-5-mini as the Responses adapter
// stores it (a reasoning item, a signed text, calls "call_id|item_id")
// and the results of its calls ids.
func respTurn(step string, ids ...string) []message.Message {
	blocks := []message.Block{
		message.Thinking("thinking "+step, `{"type":"reasoning","id":"rs_`+step+`","encrypted_content":"e<n>c","summary":[]}`),
		{Type: message.BlockText, Text: "on it " + step, TextSignature: `{"v":1,"id":"msg_` + step + `","phase":"commentary"}`},
	}
	for _, id := range ids {
		blocks = append(blocks, message.ToolCall(id+"|fc_"+id, "read", map[string]any{"path": id}))
	}
	out := []message.Message{{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "openai",
		Model: "gpt-5-mini", API: "openai-responses", Content: message.BlocksOf(blocks...)}}
	for _, id := range ids {
		out = append(out, message.Message{Role: message.RoleToolResult, ToolCallID: id + "|fc_" + id, ToolName: "read",
			Content: message.BlocksOf(message.Text("result of " + id))})
	}
	return out
}

// TestRespWireCacheBodies builds the requests of one session's turns with
// the wire cache and without it, through what a session goes through (new
// turns, reasoning items and signed texts, a compaction, a rollback, a
// rewritten tool result, another model's reply, the history limit,
// images, a model switch, a changed system prompt), and requires the same
// bytes every time, and the cached items reused.
func TestRespWireCacheBodies(t *testing.T) {
	t.Parallel()
	mini := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", MaxTokens: 1000, Reasoning: true, Input: []string{"text", "image"}}
	nano := provider.Model{ID: "gpt-5-nano", Provider: "openai", API: "openai-responses", Reasoning: true, Input: []string{"text"}}
	plain := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", Input: []string{"text", "image"}}
	codex := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-codex-responses", Input: []string{"text", "image"}}
	h := respHistory(40)
	cut := slices.Clone(h)
	cut[10].Content = message.BlocksOf(message.Text("[truncated]"))
	other := slices.Clone(h)
	other[13].Provider, other[13].Model = "anthropic", "claude"
	signed := append(slices.Clone(h[:20]), respTurn("a", "c1", "c2")...)
	oldSig := append(slices.Clone(signed), message.Message{Role: message.RoleAssistant, StopReason: message.StopStop,
		Provider: "openai", Model: "gpt-5-mini", API: "openai-responses", Content: message.BlocksOf(
			message.Block{Type: message.BlockText, Text: "bare id", TextSignature: "msg_bare"},
			message.Block{Type: message.BlockText, Text: "long id", TextSignature: string(bytes.Repeat([]byte("x"), 65))},
			message.Thinking("bad signature", "{not json"), message.Text("  "), message.ToolCall("call_nil", "ls", nil))},
		message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Provider: "openai", Model: "gpt-5-mini", API: "openai-responses",
			Content: message.BlocksOf(message.Block{Type: message.BlockText, Text: "only a signed text", TextSignature: `{"v":1,"id":"msg_only"}`})})
	withImage := append(slices.Clone(oldSig), message.Message{Role: message.RoleUser, Timestamp: 5,
		Content: message.BlocksOf(message.Text("look"), message.Image("image/png", "iVBORw0KGgo="))})
	imgResult := append(slices.Clone(withImage), respTurn("b", "c3")...)
	imgResult[len(imgResult)-1].Content = message.BlocksOf(message.Text("see"), message.Image("image/png", "iVBORw0KGgo="))
	compacted := append([]message.Message{message.User("The conversation so far: a summary.", 3)}, h[30:]...)
	steps := []struct {
		name    string
		model   provider.Model
		system  string
		msgs    []message.Message
		reusing bool // some items' JSON must come from the cache
		// change, when set, changes the history in place before the step.
		change func()
	}{
		{"first turn", mini, "sys", h[:4], false, nil},
		{"second turn", mini, "sys", h[:8], true, nil},
		{"long session", mini, "sys", h[:40], true, nil},
		{"same again", mini, "sys", h[:40], true, nil},
		{"a text rewritten in place", mini, "sys", h[:40], true, func() { h[5].Content.Blocks[0].Text = "Let me look again." }},
		{"a message replaced in place", mini, "sys", h[:40], true, func() { h[8] = message.User("another question", 1) }},
		{"tool call arguments replaced", mini, "sys", h[:40], true, func() {
			h[13].Content.Blocks[1].Arguments = map[string]any{"path": "other.go"}
		}},
		{"a tool result's id changed", mini, "sys", h[:40], true, func() { h[14].ToolCallID = "call_x|fc_x" }},
		{"a user message emptied", mini, "sys", h[:40], true, func() { h[16].Content = message.BlocksOf(message.Text(" ")) }},
		{"tool result cut", mini, "sys", cut, true, nil},
		{"another model's reply in the history", mini, "sys", other, true, nil},
		{"history limit drops the oldest turns", mini, "sys", h[12:40], true, nil},
		{"compaction", mini, "sys", compacted, true, nil},
		{"rollback", mini, "sys", h[:6], true, nil},
		{"reasoning and signed texts", mini, "sys", signed, true, nil},
		{"older and unusable signatures", mini, "sys", oldSig, true, nil},
		{"image", mini, "sys", withImage, true, nil},
		{"image in a tool result", mini, "sys", imgResult, true, nil},
		{"model switch: another model's items, no images", nano, "sys", imgResult, true, nil},
		{"back: its own items again", mini, "sys", imgResult, true, nil},
		{"not a reasoning model: system role", plain, "sys", imgResult, true, nil},
		{"the same model id under another API: not its own items", codex, "sys", imgResult, true, nil},
		{"system prompt changed", mini, "other sys", h[:20], true, nil},
		{"no system prompt", mini, "", h[:24], true, nil},
		{"empty", mini, "", nil, false, nil},
		{"after empty", mini, "", h[:4], false, nil},
	}
	cache := newRespWireCache(WireCacheBytesDefault)
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		req := &provider.Request{Model: st.model, SystemPrompt: st.system, Messages: st.msgs, SessionID: "s1", Thinking: provider.ThinkingLow,
			Tools: []provider.Tool{{Name: "read", Parameters: map[string]any{"type": "object"}}}}
		before := cache.Reused.Load()
		got, err := buildResponsesRequest(req, cache)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		want, err := buildResponsesRequest(req, nil)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: cached body differs:\n got %s\nwant %s", st.name, got, want)
		}
		if reused := cache.Reused.Load() - before; (reused > 0) != st.reusing {
			t.Errorf("%s: %d items reused, want reuse %v", st.name, reused, st.reusing)
		}
	}
	if n := cache.Reused.Load(); n < 100 {
		t.Errorf("only %d items reused over the session", n)
	}
}

// TestRespWireCacheRandomEdits builds a session's requests through random
// edits of its history (turns added, messages dropped, replaced, cut and
// rewritten in place, tool results given images, models switched), with
// the cache and without it: the bodies are the same, byte for byte.
func TestRespWireCacheRandomEdits(t *testing.T) {
	t.Parallel()
	models := []provider.Model{
		{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", Reasoning: true, Input: []string{"text", "image"}},
		{ID: "gpt-5-nano", Provider: "openai", API: "openai-responses", Reasoning: true, Input: []string{"text"}},
		{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", Input: []string{"text"}},
	}
	cache := newRespWireCache(WireCacheBytesDefault)
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
			hist = append(hist, respHistory(4+rnd(4))...)
		case 3:
			ids := []string{fmt.Sprint("t", step)}
			for range rnd(3) {
				ids = append(ids, fmt.Sprint("t", step, "_", len(ids)))
			}
			hist = append(hist, respTurn(fmt.Sprint(step), ids...)...)
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
		got, err := buildResponsesRequest(req, cache)
		if err != nil {
			t.Fatal(err)
		}
		want, err := buildResponsesRequest(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d: cached body differs:\n got %s\nwant %s", step, got, want)
		}
	}
	if cache.Reused.Load() < 1000 {
		t.Errorf("only %d items reused", cache.Reused.Load())
	}
}

// TestRespWireCacheBounded keeps sessions within the byte budget, dropping
// the least recently used, and keeps none larger than half of it.
func TestRespWireCacheBounded(t *testing.T) {
	t.Parallel()
	m := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses"}
	cache := newRespWireCache(256 << 10)
	for i := range 50 {
		req := &provider.Request{Model: m, Messages: respHistory(40), SessionID: fmt.Sprint("s", i)}
		if _, err := buildResponsesRequest(req, cache); err != nil {
			t.Fatal(err)
		}
	}
	if cache.Take("s0") != nil {
		t.Error("the least recently used session is still kept")
	}
	if cache.Take("s49") == nil {
		t.Error("the latest session is not kept")
	}
	big := &provider.Request{Model: m, Messages: respHistory(2000), SessionID: "big"}
	if _, err := buildResponsesRequest(big, cache); err != nil {
		t.Fatal(err)
	}
	if cache.Take("big") != nil {
		t.Error("a session over half the budget is kept")
	}
}

// TestRespWireCacheConcurrent runs requests of a few sessions at once (run
// with -race): every body is the uncached one.
func TestRespWireCacheConcurrent(t *testing.T) {
	t.Parallel()
	m := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", Reasoning: true}
	cache := newRespWireCache(WireCacheBytesDefault)
	h := append(respHistory(40), respTurn("x", "c1", "c2")...)
	h = append(h, respHistory(17)...)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 30 {
				req := &provider.Request{Model: m, Messages: h[:1+(i*7+g)%len(h)], SessionID: fmt.Sprint("s", g%3)}
				got, err := buildResponsesRequest(req, cache)
				if err != nil {
					t.Error(err)
					return
				}
				if want, _ := buildResponsesRequest(req, nil); !bytes.Equal(got, want) {
					t.Errorf("session %d turn %d: cached body differs", g%3, i)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestRespInputEqualCoversFields fails when an input item type gains a
// field: respInputEqual must compare it, or the cache would reuse stale
// JSON.
func TestRespInputEqualCoversFields(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		typ  reflect.Type
		want int
	}{
		{reflect.TypeFor[respInputMessage](), 2},
		{reflect.TypeFor[respOutputMessage](), 6},
		{reflect.TypeFor[respOutputText](), 3},
		{reflect.TypeFor[respFunctionCall](), 5},
		{reflect.TypeFor[respFunctionOutput](), 3},
		{reflect.TypeFor[respPart](), 4},
	} {
		if n := c.typ.NumField(); n != c.want {
			t.Errorf("%s has %d fields; update respInputEqual and this count", c.typ.Name(), n)
		}
	}
	parts := []respPart{{Type: "input_text", Text: "x"}}
	out := respOutputMessage{Type: "message", ID: "m", Role: "assistant", Status: "completed", Phase: "p",
		Content: []respOutputText{{Type: "output_text", Text: "x", Annotations: []any{}}}}
	call := respFunctionCall{Type: "function_call", ID: "fc", CallID: "c", Name: "n", Arguments: "{}"}
	result := respFunctionOutput{Type: "function_call_output", CallID: "c", Output: "x"}
	outWith := func(f func(*respOutputMessage)) respInput { o := out; f(&o); return o }
	callWith := func(f func(*respFunctionCall)) respInput { c := call; f(&c); return c }
	resultWith := func(f func(*respFunctionOutput)) respInput { r := result; f(&r); return r }
	for i, pair := range [][2]respInput{
		{respInputMessage{Role: "user", Content: "x"}, respInputMessage{Role: "assistant", Content: "x"}},
		{respInputMessage{Role: "user", Content: "x"}, respInputMessage{Role: "user", Content: "y"}},
		{respInputMessage{Role: "user", Content: "x"}, respInputMessage{Role: "user", Content: parts}},
		{respInputMessage{Role: "user", Content: parts}, respInputMessage{Role: "user", Content: []respPart{{Type: "input_text", Text: "y"}}}},
		{respInputMessage{Role: "user", Content: parts}, respInputMessage{Role: "user", Content: []respPart{{Type: "input_image", Text: "x"}}}},
		{respInputMessage{Role: "user", Content: parts}, respInputMessage{Role: "user", Content: []respPart{{Type: "input_text", Text: "x", ImageURL: "u"}}}},
		{respInputMessage{Role: "user", Content: parts}, respInputMessage{Role: "user", Content: []respPart{{Type: "input_text", Text: "x", Detail: "auto"}}}},
		{respInputMessage{Role: "user", Content: parts}, respInputMessage{Role: "user", Content: []respPart(nil)}},
		{respInputMessage{Role: "user"}, respInputMessage{Role: "user", Content: ""}},
		{out, outWith(func(o *respOutputMessage) { o.Type = "x" })},
		{out, outWith(func(o *respOutputMessage) { o.ID = "x" })},
		{out, outWith(func(o *respOutputMessage) { o.Role = "x" })},
		{out, outWith(func(o *respOutputMessage) { o.Status = "x" })},
		{out, outWith(func(o *respOutputMessage) { o.Phase = "" })},
		{out, outWith(func(o *respOutputMessage) { o.Content = nil })},
		{out, outWith(func(o *respOutputMessage) { o.Content = []respOutputText{{Type: "x", Text: "x", Annotations: []any{}}} })},
		{out, outWith(func(o *respOutputMessage) {
			o.Content = []respOutputText{{Type: "output_text", Text: "y", Annotations: []any{}}}
		})},
		{out, outWith(func(o *respOutputMessage) { o.Content = []respOutputText{{Type: "output_text", Text: "x"}} })},
		{out, outWith(func(o *respOutputMessage) {
			o.Content = []respOutputText{{Type: "output_text", Text: "x", Annotations: []any{"a"}}}
		})},
		{call, callWith(func(c *respFunctionCall) { c.Type = "x" })},
		{call, callWith(func(c *respFunctionCall) { c.ID = "" })},
		{call, callWith(func(c *respFunctionCall) { c.CallID = "x" })},
		{call, callWith(func(c *respFunctionCall) { c.Name = "x" })},
		{call, callWith(func(c *respFunctionCall) { c.Arguments = "{ }" })},
		{result, resultWith(func(r *respFunctionOutput) { r.Type = "x" })},
		{result, resultWith(func(r *respFunctionOutput) { r.CallID = "x" })},
		{result, resultWith(func(r *respFunctionOutput) { r.Output = "y" })},
		{result, resultWith(func(r *respFunctionOutput) { r.Output = parts })},
		{json.RawMessage(`{"a":1}`), json.RawMessage(`{"a":2}`)},
		{json.RawMessage(`{"a":1}`), json.RawMessage(nil)},
		{json.RawMessage(`{"a":1}`), respInputMessage{Role: "user", Content: `{"a":1}`}},
		{respInputMessage{Role: "user", Content: "x"}, respFunctionOutput{CallID: "x"}},
		{"a string", "a string"}, // not an item type: never proven equal
	} {
		if respInputEqual(&pair[0], &pair[1]) || respInputEqual(&pair[1], &pair[0]) {
			t.Errorf("pair %d is equal: %#v %#v", i, pair[0], pair[1])
		}
	}
	// Equal items built apart (their strings, slices and bytes elsewhere).
	for i, pair := range [][2]respInput{
		{respInputMessage{Role: "user", Content: "x"}, respInputMessage{Role: "user", Content: string([]byte("x"))}},
		{respInputMessage{Role: "user", Content: parts}, respInputMessage{Role: "user", Content: slices.Clone(parts)}},
		{out, outWith(func(o *respOutputMessage) {
			o.Content = []respOutputText{{Type: "output_text", Text: "x", Annotations: []any{}}}
		})},
		{call, callWith(func(*respFunctionCall) {})},
		{result, resultWith(func(*respFunctionOutput) {})},
		{resultWith(func(r *respFunctionOutput) { r.Output = parts }), resultWith(func(r *respFunctionOutput) { r.Output = slices.Clone(parts) })},
		{json.RawMessage(`{"a":1}`), json.RawMessage([]byte(`{"a":1}`))},
	} {
		if !respInputEqual(&pair[0], &pair[1]) || !respInputEqual(&pair[1], &pair[0]) {
			t.Errorf("equal pair %d is not equal: %#v %#v", i, pair[0], pair[1])
		}
	}
}
