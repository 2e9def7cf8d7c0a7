package sanitize

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

var fuzzTargets = [][3]string{
	{"anthropic", "anthropic-messages", "claude-opus-4-6"},
	{"google", "google-generative-ai", "gemini-2.5-pro"},
	{"openai", "openai-responses", "gpt-5.2"},
	{"mistral", "openai-completions", "mistral-large"},
	{"github-copilot", "openai-completions", "claude-opus-4.6"},
	{"openrouter", "openai-completions", "google/gemini-2.5-pro"},
	{"moonshot", "openai-completions", "kimi-k2.5"},
}

func FuzzSanitizeID(f *testing.F) {
	for _, s := range []string{"", "call_1", "call_abc|item:123", "toolu_01VihkDRptyLpX1ApUPe7ooU", "|||", "ab_c", "é", "abcdefghijklmnopqrstuvwxyz0123456789abcdefghij"} {
		f.Add(s, s+"_x", false)
		f.Add(s, "x"+s, true)
	}
	f.Fuzz(func(t *testing.T, a, b string, nine bool) {
		mode := IDStrict
		if nine {
			mode = IDStrict9
		}
		id := SanitizeID(a, mode)
		if !ValidID(id, mode) {
			t.Fatalf("SanitizeID(%q, %s) = %q is not valid", a, mode, id)
		}
		if again := SanitizeID(id, mode); again != id {
			t.Fatalf("not idempotent: %q → %q → %q", a, id, again)
		}
		// Transcript-wide: calls and results stay paired and distinct ids
		// stay distinct.
		msgs := []message.Message{
			{Role: message.RoleAssistant, Content: message.BlocksOf(
				message.ToolCall(a, "read", map[string]any{}), message.ToolCall(b, "read", map[string]any{}))},
			{Role: message.RoleToolResult, ToolCallID: b},
			{Role: message.RoleToolResult, ToolCallID: a},
		}
		out, _ := SanitizeToolCallIDs(msgs, mode, testNow)
		ca, cb := out[0].Content.Blocks[0].ID, out[0].Content.Blocks[1].ID
		if a != "" && out[2].ToolCallID != ca || b != "" && out[1].ToolCallID != cb {
			t.Fatalf("calls and results split: %q %q / %q %q", ca, cb, out[2].ToolCallID, out[1].ToolCallID)
		}
		if a != "" && b != "" && (a == b) != (ca == cb) {
			t.Fatalf("ids %q %q became %q %q", a, b, ca, cb)
		}
		if msgs[0].Content.Blocks[0].ID != a || msgs[1].ToolCallID != b {
			t.Fatal("input modified")
		}
	})
}

func FuzzPrepare(f *testing.F) {
	for _, seed := range transcriptSeeds(f) {
		for i := range fuzzTargets {
			f.Add(seed, uint8(i), int8(0))
		}
		f.Add(seed, uint8(0), int8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, target uint8, limit int8) {
		var msgs []message.Message
		if json.Unmarshal(data, &msgs) != nil {
			return
		}
		tg := fuzzTargets[int(target)%len(fuzzTargets)]
		before, err := json.Marshal(msgs)
		if err != nil {
			return
		}
		req := Request{Provider: tg[0], API: tg[1], ModelID: tg[2], Messages: msgs, HistoryLimit: int(limit), Now: testNow,
			Images: ImageLimits{MaxSide: 64, MaxBytes: 64 << 10}}
		first := Prepare(req)
		after, _ := json.Marshal(msgs)
		if string(before) != string(after) {
			t.Fatalf("input modified:\n%s\n%s", before, after)
		}
		for _, m := range msgs {
			if m.Role == "" {
				// A message without a role takes part in the turn merge
				// like in the reference, which is not idempotent.
				return
			}
		}
		req.Messages = first.Final
		second := Prepare(req)
		a, _ := json.Marshal(first.Final)
		b, _ := json.Marshal(second.Final)
		var av, bv any
		json.Unmarshal(a, &av)
		json.Unmarshal(b, &bv)
		if !reflect.DeepEqual(av, bv) {
			t.Fatalf("not idempotent for %v:\nonce  %s\ntwice %s", tg, a, b)
		}
	})
}
