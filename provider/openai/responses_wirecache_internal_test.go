package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

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

// respWire is the Responses adapter for the wire cache tests every
// adapter passes.
var respWire = wiretest.Wire[respInput, respConv]{
	Build:    wiretest.Whole(buildResponsesRequest),
	New:      newRespWireCache,
	Model:    provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses"},
	Reply:    respTurn,
	Thinking: provider.ThinkingLow,
}

// TestRespWireCacheBodies: see wiretest.Wire.Steps; here also a user
// message emptied, reasoning items and signed texts (bare, overlong and
// unusable signatures too), images, a model switch, a model that does not
// reason and the same model id under another API.
func TestRespWireCacheBodies(t *testing.T) {
	t.Parallel()
	mini := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", MaxTokens: 1000, Reasoning: true, Input: []string{"text", "image"}}
	nano := provider.Model{ID: "gpt-5-nano", Provider: "openai", API: "openai-responses", Reasoning: true, Input: []string{"text"}}
	plain := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", Input: []string{"text", "image"}}
	codex := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-codex-responses", Input: []string{"text", "image"}}
	respWire.Steps(t, mini, func(h []message.Message) []wiretest.Step {
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
		return []wiretest.Step{
			{"a user message emptied", mini, "sys", h[:40], true, func() { h[16].Content = message.BlocksOf(message.Text(" ")) }},
			{"reasoning and signed texts", mini, "sys", signed, true, nil},
			{"older and unusable signatures", mini, "sys", oldSig, true, nil},
			{"image", mini, "sys", withImage, true, nil},
			{"image in a tool result", mini, "sys", imgResult, true, nil},
			{"model switch: another model's items, no images", nano, "sys", imgResult, true, nil},
			{"back: its own items again", mini, "sys", imgResult, true, nil},
			{"not a reasoning model: system role", plain, "sys", imgResult, true, nil},
			{"the same model id under another API: not its own items", codex, "sys", imgResult, true, nil},
		}
	})
}

// TestRespWireCacheRandomEdits: see wiretest.Wire.RandomEdits.
func TestRespWireCacheRandomEdits(t *testing.T) {
	t.Parallel()
	respWire.RandomEdits(t,
		provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", Reasoning: true, Input: []string{"text", "image"}},
		provider.Model{ID: "gpt-5-nano", Provider: "openai", API: "openai-responses", Reasoning: true, Input: []string{"text"}},
		provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", Input: []string{"text"}})
}

// TestRespWireCacheBounded: see wiretest.Wire.Bounded.
func TestRespWireCacheBounded(t *testing.T) {
	t.Parallel()
	respWire.Bounded(t)
}

// TestRespWireCacheConcurrent: see wiretest.Wire.Concurrent; the history
// holds reasoning items and signed texts.
func TestRespWireCacheConcurrent(t *testing.T) {
	t.Parallel()
	m := respWire.Model
	m.Reasoning = true
	h := append(respWire.History(40), respTurn("x", "c1", "c2")...)
	respWire.Concurrent(t, m, append(h, respWire.History(17)...))
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

// TestRespWireCacheAppends: see wiretest.Wire.Appends; the requests that
// repeat the last one's messages take their input items whole
// (wirecache.Forms.Skip), and the bodies are still the whole conversion's.
func TestRespWireCacheAppends(t *testing.T) {
	t.Parallel()
	cache := respWire.Appends(t, respAppendModels...)
	if cache.Skipped.Load() == 0 {
		t.Error("no request took the last one's input items whole")
	}
}

// respAppendModels are the models a session of the Appends tests
// switches between.
var respAppendModels = []provider.Model{
	{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", Reasoning: true, Input: []string{"text", "image"}},
	{ID: "gpt-5-nano", Provider: "openai", API: "openai-responses", Input: []string{"text"}},
}

// FuzzRespWireCacheAppends: see wiretest.Wire.FuzzAppends.
func FuzzRespWireCacheAppends(f *testing.F) {
	respWire.FuzzAppends(f, respAppendModels...)
}

// inFlight is w building every body in parts (of any size) and keeping
// each in flight until its session's next request is built (see
// wiretest.InFlight).
func inFlight[M, C any](w wiretest.Wire[M, C], build func(*provider.Request, *wirecache.Cache[M, C]) (wirecache.Parts, error)) wiretest.Wire[M, C] {
	newCache := w.New
	w.New = func(n int) *wirecache.Cache[M, C] {
		c := newCache(n)
		if c != nil {
			c.PartsFrom = 0
		}
		return c
	}
	w.Build = wiretest.InFlight(build)
	return w
}

// TestRespWireCacheInFlight: a body is sent from the JSON the cache keeps
// (wirecache.Forms.MarshalParts), and the session's next request, built
// while that body is still being sent, writes none of it, whatever it
// changed (wiretest.Wire.Steps', RandomEdits' and Appends' sessions: in
// place, rolled back, compacted, cut at the front), and from any
// goroutine (Concurrent); every body is still the uncached one.
func TestRespWireCacheInFlight(t *testing.T) {
	t.Parallel()
	w := inFlight(respWire, buildResponsesRequest)
	mini := provider.Model{ID: "gpt-5-mini", Provider: "openai", API: "openai-responses", Reasoning: true, Input: []string{"text", "image"}}
	nano := provider.Model{ID: "gpt-5-nano", Provider: "openai", API: "openai-responses", Reasoning: true, Input: []string{"text"}}
	w.Steps(t, mini, func([]message.Message) []wiretest.Step { return nil })
	w.RandomEdits(t, mini, nano)
	w.Appends(t, mini, nano)
	w.Concurrent(t, mini, append(w.History(40), respTurn("x", "c1", "c2")...))
}
