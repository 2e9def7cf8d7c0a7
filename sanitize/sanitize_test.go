package sanitize

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"reflect"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

const testNow int64 = 1750000000000

// parse decodes a JSON array of pi messages.
func parse(t testing.TB, s string) []message.Message {
	t.Helper()
	var msgs []message.Message
	if err := json.Unmarshal([]byte(s), &msgs); err != nil {
		t.Fatalf("parse %s: %v", s, err)
	}
	return msgs
}

// canon encodes v as JSON and decodes it generically, so values compare by
// content.
func canon(t testing.TB, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func checkJSON(t testing.TB, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	if g := canon(t, got); !reflect.DeepEqual(g, w) {
		gd, _ := json.Marshal(g)
		t.Errorf("got  %s\nwant %s", gd, want)
	}
}

func TestValidateAnthropicTurnsKeepsStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{
			// The reference loses both strings (spec §25).
			name: "two plain strings",
			in:   `[{"role":"user","content":"first"},{"role":"user","content":"second","timestamp":2}]`,
			want: `[{"role":"user","content":[{"type":"text","text":"first"},{"type":"text","text":"second"}],"timestamp":2}]`,
		},
		{
			name: "string then blocks keeps order and the earlier timestamp",
			in:   `[{"role":"user","content":"a","timestamp":1},{"role":"user","content":[{"type":"text","text":"b"}]}]`,
			want: `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"timestamp":1}]`,
		},
		{
			// An empty string would become an empty text block, which
			// Anthropic rejects.
			name: "empty string contributes nothing",
			in:   `[{"role":"user","content":""},{"role":"user","content":"x"}]`,
			want: `[{"role":"user","content":[{"type":"text","text":"x"}]}]`,
		},
		{
			// As in the reference: a message without a role does not end
			// the run, and the next user message is merged into it (its
			// content is not a known block list, so only b is left).
			name: "message without role",
			in:   `[{"role":"user","content":"a"},{"content":[{"type":"text","text":"x"}],"note":1},{"role":"user","content":"b"}]`,
			want: `[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"b"}]}]`,
		},
		{
			name: "later fields win",
			in:   `[{"role":"user","content":"a","k":1},{"role":"user","content":"b","k":2}]`,
			want: `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"k":2}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkJSON(t, ValidateAnthropicTurns(parse(t, tt.in)), tt.want)
		})
	}
}

func TestPrepareKeepsMergedStringUsers(t *testing.T) {
	t.Parallel()
	res := Prepare(Request{
		Provider: "anthropic", API: "anthropic-messages", ModelID: "claude-opus-4-6", Now: testNow,
		Messages: parse(t, `[{"role":"user","content":"first"},{"role":"assistant","content":[{"type":"text","text":""}],"stopReason":"stop"},{"role":"user","content":"second"}]`),
	})
	checkJSON(t, res.Sanitized, `[{"role":"user","content":"first"},{"role":"user","content":"second"}]`)
	checkJSON(t, res.Final, `[{"role":"user","content":[{"type":"text","text":"first"},{"type":"text","text":"second"}]}]`)
}

func TestRepairPairing(t *testing.T) {
	t.Parallel()
	synthetic := func(id, name string) string {
		return `{"role":"toolResult","toolCallId":"` + id + `","toolName":"` + name + `","content":[{"type":"text","text":"` + MissingToolResultText + `"}],"isError":true,"timestamp":1750000000000}`
	}
	call := func(ids ...string) string {
		var b []string
		for _, id := range ids {
			b = append(b, `{"type":"toolCall","id":"`+id+`","name":"read","arguments":{}}`)
		}
		return `{"role":"assistant","content":[` + strings.Join(b, ",") + `]}`
	}
	result := func(id, text string) string {
		return `{"role":"toolResult","toolCallId":"` + id + `","toolName":"read","content":[{"type":"text","text":"` + text + `"}],"isError":false}`
	}
	list := func(items ...string) string { return "[" + strings.Join(items, ",") + "]" }
	tests := []struct {
		name    string
		in      string
		want    string
		changed bool
		dups    int
		orphans int
		added   []string
	}{
		{
			// The reference drops the second result as a transcript-wide
			// duplicate and leaves the second call without any result.
			name:    "reused call id keeps its own result",
			in:      list(call("c1"), result("c1", "first"), `{"role":"user","content":"again"}`, call("c1"), result("c1", "second")),
			want:    list(call("c1"), result("c1", "first"), `{"role":"user","content":"again"}`, call("c1"), result("c1", "second")),
			changed: true, // the reference reports the first span as moved
		},
		{
			name:    "reused call id without a result gets a synthetic one",
			in:      list(call("c1"), result("c1", "first"), call("c1")),
			want:    list(call("c1"), result("c1", "first"), call("c1"), synthetic("c1", "read")),
			changed: true, added: []string{"c1"},
		},
		{
			// As the reference: nothing was dropped or synthesised and no
			// span holds another message, so the input stands.
			name: "results out of order at the end are left alone",
			in:   list(call("a", "b"), result("b", "B"), result("a", "A")),
			want: list(call("a", "b"), result("b", "B"), result("a", "A")),
		},
		{
			name:    "results out of order before a user message are reordered",
			in:      list(call("a", "b"), result("b", "B"), `{"role":"user","content":"q"}`, result("a", "A")),
			want:    list(call("a", "b"), result("a", "A"), result("b", "B"), `{"role":"user","content":"q"}`),
			changed: true,
		},
		{
			// A second result for a call in the span is discarded without
			// a report; at the very end the input stands (runtime spec §7.2).
			name: "a second result in the span that ends the transcript is kept",
			in:   list(call("a"), result("a", "one"), result("a", "two")),
			want: list(call("a"), result("a", "one"), result("a", "two")),
		},
		{
			name:    "a second result in a span that goes on is discarded, unreported",
			in:      list(call("a"), result("a", "one"), result("a", "two"), `{"role":"user","content":"q"}`),
			want:    list(call("a"), result("a", "one"), `{"role":"user","content":"q"}`),
			changed: true,
		},
		{
			name:    "a second result in a span that needs repair is discarded, unreported",
			in:      list(call("a", "b"), result("a", "one"), result("a", "two")),
			want:    list(call("a", "b"), result("a", "one"), synthetic("b", "read")),
			changed: true, added: []string{"b"},
		},
		{
			name:    "same id twice in one message gets one result",
			in:      list(call("a", "a"), result("a", "one")),
			want:    list(call("a", "a"), result("a", "one")),
			changed: true, dups: 1,
		},
		{
			// The reference synthesises for each call and then drops the
			// second as a duplicate: both are reported.
			name:    "same id twice in one message without a result",
			in:      list(call("a", "a")),
			want:    list(call("a", "a"), synthetic("a", "read")),
			changed: true, dups: 1, added: []string{"a", "a"},
		},
		{
			name:    "a call without a name gets a synthetic result named unknown",
			in:      `[{"role":"assistant","content":[{"type":"toolCall","id":"n1","arguments":{}}]}]`,
			want:    `[{"role":"assistant","content":[{"type":"toolCall","id":"n1","name":"","arguments":{}}]},` + synthetic("n1", "unknown") + `]`,
			changed: true, added: []string{"n1"},
		},
		{
			name:    "a legacy call without a name too",
			in:      `[{"role":"assistant","content":[{"type":"toolUse","id":"n2","input":{}}]},{"role":"user","content":"q"}]`,
			want:    `[{"role":"assistant","content":[{"type":"toolUse","id":"n2","input":{}}]},` + synthetic("n2", "unknown") + `,{"role":"user","content":"q"}]`,
			changed: true, added: []string{"n2"},
		},
		{
			name:    "a result without an id is an orphan",
			in:      list(call("a"), `{"role":"toolResult","toolName":"read","content":[],"isError":false}`, result("a", "A")),
			want:    list(call("a"), result("a", "A")),
			changed: true, orphans: 1,
		},
		{
			name: "well formed is untouched",
			in:   list(`{"role":"user","content":"q"}`, call("a"), result("a", "A")),
			want: list(`{"role":"user","content":"q"}`, call("a"), result("a", "A")),
		},
		{
			name:    "leading orphan dropped",
			in:      list(result("x", "X"), `{"role":"user","content":"q"}`),
			want:    list(`{"role":"user","content":"q"}`),
			changed: true, orphans: 1,
		},
		{
			name:    "legacy toolUse and toolUseId pair up",
			in:      `[{"role":"assistant","content":[{"type":"toolUse","id":"u1","name":"read","input":{}}]},{"role":"user","content":"hi"},{"role":"toolResult","toolUseId":"u1","content":[]}]`,
			want:    `[{"role":"assistant","content":[{"type":"toolUse","id":"u1","name":"read","input":{}}]},{"role":"toolResult","toolCallId":"","toolUseId":"u1","content":[],"isError":false},{"role":"user","content":"hi"}]`,
			changed: true,
		},
		{
			name: "empty", in: `[]`, want: `[]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := parse(t, tt.in)
			before := canon(t, in)
			got, rep := RepairPairing(in, testNow)
			checkJSON(t, got, tt.want)
			if rep.Changed != tt.changed || rep.DroppedDuplicateCount != tt.dups || rep.DroppedOrphanCount != tt.orphans {
				t.Errorf("report = %+v, want changed=%v dups=%d orphans=%d", rep, tt.changed, tt.dups, tt.orphans)
			}
			if len(rep.AddedSyntheticFor) != len(tt.added) || (len(tt.added) > 0 && !reflect.DeepEqual(rep.AddedSyntheticFor, tt.added)) {
				t.Errorf("added = %v, want %v", rep.AddedSyntheticFor, tt.added)
			}
			if !reflect.DeepEqual(canon(t, in), before) {
				t.Error("input was modified")
			}
			again, rep2 := RepairPairing(got, testNow)
			if !reflect.DeepEqual(canon(t, again), canon(t, got)) || len(rep2.AddedSyntheticFor) > 0 {
				t.Errorf("second repair changed the result: %+v", rep2)
			}
		})
	}
}

func TestRepairPairingManyCalls(t *testing.T) {
	t.Parallel()
	// Past 16 calls the span is matched through an index; the result must
	// be the same as the linear scan.
	var blocks []message.Block
	var msgs []message.Message
	for i := 0; i < 40; i++ {
		blocks = append(blocks, message.ToolCall(fmt.Sprintf("c%d", i%30), "read", map[string]any{}))
	}
	msgs = append(msgs, message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(blocks...)})
	for i := 29; i >= 0; i -= 2 {
		msgs = append(msgs, message.Message{Role: message.RoleToolResult, ToolCallID: fmt.Sprintf("c%d", i)})
	}
	out, rep := RepairPairing(msgs, testNow)
	// 15 results and 15 synthetic ones for the 30 ids; the 10 repeated
	// calls are dropped as duplicates, the 5 of them without a result
	// reported as synthesised too (as the reference does).
	if len(out) != 31 || rep.DroppedDuplicateCount != 10 || len(rep.AddedSyntheticFor) != 20 {
		t.Fatalf("got %d messages, report %+v", len(out), rep)
	}
	for i := 1; i <= 30; i++ {
		if out[i].ToolCallID != fmt.Sprintf("c%d", i-1) {
			t.Fatalf("result %d answers %s", i, out[i].ToolCallID)
		}
	}
}

func TestRepairPairingReusedCallID(t *testing.T) {
	t.Parallel()
	in := parse(t, `[
		{"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"read","arguments":{}}]},
		{"role":"toolResult","toolCallId":"call_1","toolName":"read","content":[{"type":"text","text":"first"}],"isError":false},
		{"role":"user","content":"again"},
		{"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"read","arguments":{}}]},
		{"role":"toolResult","toolCallId":"call_1","toolName":"read","content":[{"type":"text","text":"second"}],"isError":false}]`)
	got, rep := RepairPairing(in, testNow)
	if len(got) != 5 || got[4].Content.Text() != "second" {
		t.Fatalf("the reused call lost its result: %s", canon(t, got))
	}
	if rep.DroppedDuplicateCount != 0 || len(rep.AddedSyntheticFor) != 0 {
		t.Errorf("report = %+v", rep)
	}
}

func TestPlainStringToolResultKept(t *testing.T) {
	t.Parallel()
	for _, provider := range [][3]string{
		{"anthropic", "anthropic-messages", "claude-opus-4-6"},
		{"openai", "openai-responses", "gpt-5.2"},
	} {
		res := Prepare(Request{
			Provider: provider[0], API: provider[1], ModelID: provider[2], Now: testNow,
			Messages: parse(t, `[{"role":"user","content":"go"},
				{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"exec","arguments":{}}],"stopReason":"toolUse"},
				{"role":"toolResult","toolCallId":"c1","toolName":"exec","content":"the output","isError":false,"details":{"x":1}},
				{"role":"toolResult","toolCallId":"c1","toolName":"exec","content":"","isError":false},
				{"role":"user","content":"thanks"}]`),
		})
		// The reference empties a plain-string result; it becomes a text
		// block instead. The second result is a duplicate (dropped: the span
		// goes on with the user's message).
		checkJSON(t, res.Final[2], `{"role":"toolResult","toolCallId":"c1","toolName":"exec","content":[{"type":"text","text":"the output"}],"isError":false}`)
		if len(res.Final) != 4 {
			t.Errorf("%s: final has %d messages", provider[0], len(res.Final))
		}
	}
}

func TestInterSessionAnnotation(t *testing.T) {
	t.Parallel()
	prov := `"provenance":{"kind":"inter_session","sourceSessionKey":"agent:main:x","sourceChannel":"  ","sourceTool":"sessions_send"}`
	prefix := `[Inter-session message] sourceSession=agent:main:x sourceTool=sessions_send`
	tests := []struct{ name, in, want string }{
		{"string content", `{"role":"user","content":"hello",` + prov + `}`,
			`{"role":"user","content":"` + prefix + `\nhello",` + prov + `}`},
		{"first text block", `{"role":"user","content":[{"type":"image","data":"","mimeType":"image/png"},{"type":"text","text":"hi"}],` + prov + `}`,
			`{"role":"user","content":[{"type":"text","text":"[session:history] omitted empty image payload"},{"type":"text","text":"` + prefix + `\nhi"}],` + prov + `}`},
		{"no text block", `{"role":"user","content":[],` + prov + `}`,
			`{"role":"user","content":[{"type":"text","text":"` + prefix + `"}],` + prov + `}`},
		{"already prefixed", `{"role":"user","content":"` + prefix + `\nx",` + prov + `}`,
			`{"role":"user","content":"` + prefix + `\nx",` + prov + `}`},
		{"other provenance", `{"role":"user","content":"hi","provenance":{"kind":"channel"}}`,
			`{"role":"user","content":"hi","provenance":{"kind":"channel"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := Prepare(Request{Provider: "openai", API: "openai-responses", ModelID: "gpt-5.2", Now: testNow, Messages: parse(t, "["+tt.in+"]")})
			checkJSON(t, res.Final, "["+tt.want+"]")
		})
	}
}

func TestModelSnapshot(t *testing.T) {
	t.Parallel()
	snap := func(provider string) CustomEntry {
		return CustomEntry{CustomType: CustomModelSnapshot, Data: map[string]any{"provider": provider, "modelApi": "anthropic-messages", "modelId": "m"}}
	}
	tests := []struct {
		name    string
		session []CustomEntry
		want    bool
	}{
		{"none", nil, true},
		{"same", []CustomEntry{snap("anthropic")}, false},
		{"changed", []CustomEntry{snap("anthropic"), snap("other")}, true},
		{"back to the same", []CustomEntry{snap("other"), snap("anthropic")}, false},
		{"last without data is ignored", []CustomEntry{snap("anthropic"), {CustomType: CustomModelSnapshot}}, false},
	}
	for _, tt := range tests {
		res := Prepare(Request{Provider: "anthropic", API: "anthropic-messages", ModelID: "m", Now: testNow, Session: tt.session})
		if got := len(res.Appended) == 1; got != tt.want {
			t.Errorf("%s: appended %v", tt.name, res.Appended)
		}
	}
	if res := Prepare(Request{Now: testNow}); len(res.Appended) != 0 || res.Final == nil {
		t.Errorf("no model: %+v", res)
	}
}

func TestDropThinkingBlocksCopilotClaude(t *testing.T) {
	t.Parallel()
	res := Prepare(Request{
		Provider: "github-copilot", API: "openai-completions", ModelID: "claude-opus-4.6", Now: testNow,
		Messages: parse(t, `[{"role":"user","content":"q"},
			{"role":"assistant","content":[{"type":"thinking","thinking":"t","thinkingSignature":"s"},{"type":"text","text":"a"}]},
			{"role":"user","content":"q2"},
			{"role":"assistant","content":[{"type":"thinking","thinking":"only"}]}]`),
	})
	checkJSON(t, res.Final, `[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"a"}]},
		{"role":"user","content":"q2"},{"role":"assistant","content":[{"type":"text","text":""}]}]`)
}

func TestZeroStaleUsageISOTimestamp(t *testing.T) {
	t.Parallel()
	usage := `"usage":{"input":5,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":10,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}`
	zero := `"usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}`
	in := parse(t, `[{"role":"compactionSummary","summary":"s","timestamp":"2023-11-14T22:13:20.000Z"},
		{"role":"assistant","content":[{"type":"text","text":"old"}],"timestamp":1700000000000,`+usage+`},
		{"role":"assistant","content":[{"type":"text","text":"new"}],"timestamp":1700000000001,`+usage+`}]`)
	checkJSON(t, ZeroStaleUsage(in), `[{"role":"compactionSummary","summary":"s","timestamp":"2023-11-14T22:13:20.000Z"},
		{"role":"assistant","content":[{"type":"text","text":"old"}],"timestamp":1700000000000,`+zero+`},
		{"role":"assistant","content":[{"type":"text","text":"new"}],"timestamp":1700000000001,`+usage+`}]`)
}

func TestDowngradeOpenAIReasoning(t *testing.T) {
	t.Parallel()
	in := parse(t, `[
		{"role":"assistant","content":[{"type":"thinking","thinking":"a","thinkingSignature":{"id":"rs_1","type":"reasoning.encrypted"}}]},
		{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"thinking","thinking":"b","thinkingSignature":"{\"id\":\"rs_2\",\"type\":\"reasoning\"}"}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"c","thinkingSignature":"{\"id\":\"rs_3\",\"type\":\"reasoning\"}"},{"type":"text","text":"y"}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"d","thinkingSignature":"{\"id\":\"msg_3\",\"type\":\"reasoning\"}"}]}]`)
	checkJSON(t, DowngradeOpenAIReasoning(in), `[
		{"role":"assistant","content":[{"type":"text","text":"x"}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"c","thinkingSignature":"{\"id\":\"rs_3\",\"type\":\"reasoning\"}"},{"type":"text","text":"y"}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"d","thinkingSignature":"{\"id\":\"msg_3\",\"type\":\"reasoning\"}"}]}]`)
}

func TestValidBase64Signature(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   any
		want bool
	}{
		{"AQID", true},                 // standard
		{"AQI", true},                  // unpadded
		{"AQI=", true},                 // padded
		{"c2lnbmF0dXJl", true},         // "signature"
		{" AQ ID ", true},              // white space is ignored
		{"-_-_", true},                 // URL-safe alphabet
		{"msg_abc123", false},          // trailing bits do not round-trip
		{"not base64!", false},         // bad characters
		{"", false},                    // empty
		{"A", false},                   // decodes to nothing
		{"ab+c_d", false},              // mixed alphabets
		{42, false},                    // not a string
		{map[string]any{}, false},      // not a string
		{"AQ==ID", false},              // padding in the middle
		{strings.Repeat("A", 8), true}, // zero bytes still count
	}
	for _, tt := range tests {
		if got := ValidBase64Signature(tt.in); got != tt.want {
			t.Errorf("ValidBase64Signature(%#v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func pngData(t testing.TB, w, h int, noisy bool) string {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	seed := uint32(1)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.NRGBA{uint8(x), uint8(y), 128, 255}
			if noisy {
				seed = seed*1664525 + 1013904223
				c = color.NRGBA{uint8(seed >> 24), uint8(seed >> 16), uint8(seed >> 8), 255}
			}
			img.SetNRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestSanitizeImageBlocks(t *testing.T) {
	t.Parallel()
	small := pngData(t, 4, 3, false)
	wide := pngData(t, 2000, 100, false)
	noisy := pngData(t, 300, 300, true)

	decodeJPEG := func(t *testing.T, b message.Block) image.Config {
		t.Helper()
		raw, err := base64.StdEncoding.DecodeString(b.Data)
		if err != nil {
			t.Fatal(err)
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
		if err != nil || format != "jpeg" {
			t.Fatalf("not a jpeg: %v %s", err, format)
		}
		return cfg
	}

	t.Run("small png kept with canonical data and inferred mime", func(t *testing.T) {
		t.Parallel()
		in := []message.Block{message.Image("image/webp", small[:10]+"\n"+small[10:])}
		out, changed := SanitizeImageBlocks(in, LabelHistory, ImageLimits{})
		if !changed || out[0].Data != small || out[0].MimeType != "image/png" {
			t.Errorf("got changed=%v mime=%s", changed, out[0].MimeType)
		}
		if in[0].MimeType != "image/webp" {
			t.Error("input modified")
		}
	})
	t.Run("untouched when already fine", func(t *testing.T) {
		t.Parallel()
		_, changed := SanitizeImageBlocks([]message.Block{message.Image("image/png", small)}, LabelHistory, ImageLimits{})
		if changed {
			t.Error("changed")
		}
	})
	t.Run("too wide is resized to jpeg", func(t *testing.T) {
		t.Parallel()
		out, _ := SanitizeImageBlocks([]message.Block{message.Image("image/png", wide)}, LabelHistory, ImageLimits{})
		if out[0].Type != message.BlockImage || out[0].MimeType != "image/jpeg" {
			t.Fatalf("got %+v", out[0].Type)
		}
		if cfg := decodeJPEG(t, out[0]); cfg.Width != 1200 || cfg.Height != 60 {
			t.Errorf("size %dx%d, want 1200x60", cfg.Width, cfg.Height)
		}
	})
	t.Run("too many bytes walks the ladder", func(t *testing.T) {
		t.Parallel()
		raw, _ := base64.StdEncoding.DecodeString(noisy)
		lim := ImageLimits{MaxBytes: len(raw) / 3}
		out, _ := SanitizeImageBlocks([]message.Block{message.Image("image/png", noisy)}, LabelHistory, lim)
		if out[0].Type != message.BlockImage {
			t.Fatalf("got text %q", out[0].Text)
		}
		if n := base64.StdEncoding.DecodedLen(len(out[0].Data)); n > lim.MaxBytes+2 {
			t.Errorf("jpeg of %d bytes over the limit %d", n, lim.MaxBytes)
		}
		if cfg := decodeJPEG(t, out[0]); cfg.Width != 300 {
			t.Errorf("width %d, want 300 (no enlargement)", cfg.Width)
		}
	})
	t.Run("cannot be reduced", func(t *testing.T) {
		t.Parallel()
		out, _ := SanitizeImageBlocks([]message.Block{message.Image("image/png", noisy)}, "read:x.png", ImageLimits{MaxBytes: 100})
		want := "[read:x.png] omitted image payload: Error: Image could not be reduced below 0MB (got "
		if out[0].Type != message.BlockText || !strings.HasPrefix(out[0].Text, want) || !strings.HasSuffix(out[0].Text, "MB)") {
			t.Errorf("got %q", out[0].Text)
		}
	})
	tests := []struct{ name, data, want string }{
		{"empty", "  ", "[session:history] omitted empty image payload"},
		{"invalid base64", "abc", "[session:history] omitted image payload: invalid base64"},
		{"url-safe base64", "ab_d", "[session:history] omitted image payload: invalid base64"},
		{"not an image", base64.StdEncoding.EncodeToString([]byte("hello world!")), "[session:history] omitted image payload: Error: Input buffer contains unsupported image format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, changed := SanitizeImageBlocks([]message.Block{message.Text("keep"), message.Image("image/png", tt.data)}, LabelHistory, ImageLimits{})
			if !changed || out[0].Text != "keep" || out[1].Type != message.BlockText || out[1].Text != tt.want {
				t.Errorf("got %+v", out)
			}
		})
	}
}

func TestPrepareDoesNotModifyInput(t *testing.T) {
	t.Parallel()
	for _, tc := range historyInputs(t) {
		in := tc.req.Messages
		before := canon(t, in)
		Prepare(tc.req)
		if !reflect.DeepEqual(canon(t, in), before) {
			t.Errorf("%s: input modified", tc.name)
		}
	}
}

func TestPrepareIsIdempotent(t *testing.T) {
	t.Parallel()
	for _, tc := range historyInputs(t) {
		first := Prepare(tc.req)
		req := tc.req
		req.Messages = first.Final
		second := Prepare(req)
		if g, w := canon(t, second.Final), canon(t, first.Final); !reflect.DeepEqual(g, w) {
			gd, _ := json.Marshal(g)
			wd, _ := json.Marshal(w)
			t.Errorf("%s: not idempotent\nonce  %s\ntwice %s", tc.name, wd, gd)
		}
	}
}

func TestPrepareReusedCallIDBecomesUnique(t *testing.T) {
	t.Parallel()
	in := `[{"role":"user","content":"a"},
		{"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"read","arguments":{}}],"stopReason":"toolUse"},
		{"role":"toolResult","toolCallId":"call_1","toolName":"read","content":[{"type":"text","text":"first"}],"isError":false},
		{"role":"user","content":"again"},
		{"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"read","arguments":{}}],"stopReason":"toolUse"},
		{"role":"toolResult","toolCallId":"call_1","toolName":"read","content":[{"type":"text","text":"second"}],"isError":false},
		{"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"read","arguments":{}}],"stopReason":"toolUse"}]`
	for _, tt := range []struct {
		target [3]string
		unique bool
	}{
		{[3]string{"anthropic", "anthropic-messages", "claude-opus-4-6"}, true},
		{[3]string{"mistral", "openai-completions", "mistral-large"}, true},
		// Kimi reuses its own ids across turns; they are left alone.
		{[3]string{"moonshot", "openai-completions", "kimi-k2.5"}, false},
	} {
		res := Prepare(Request{Provider: tt.target[0], API: tt.target[1], ModelID: tt.target[2], Now: testNow, Messages: parse(t, in)})
		var calls, results []string
		for _, m := range res.Final {
			for _, b := range m.ToolCalls() {
				calls = append(calls, b.ID)
			}
			if m.Role == message.RoleToolResult {
				results = append(results, m.ToolCallID)
			}
		}
		if !reflect.DeepEqual(calls, results) || len(calls) != 3 {
			t.Errorf("%s: calls %v, results %v", tt.target[0], calls, results)
		}
		distinct := calls[0] != calls[1] && calls[1] != calls[2] && calls[0] != calls[2]
		if distinct != tt.unique {
			t.Errorf("%s: ids %v, want unique=%v", tt.target[0], calls, tt.unique)
		}
		if res.Final[3].Content.Text() != "second" && res.Final[5].Content.Text() != "second" {
			t.Errorf("%s: the second result was lost", tt.target[0])
		}
		for _, id := range calls {
			if tt.unique && !ValidID(id, PolicyFor(tt.target[0], tt.target[1], tt.target[2]).ToolCallIDMode) {
				t.Errorf("%s: invalid id %q", tt.target[0], id)
			}
		}
	}
}

// TestPrepareUnchangedNotCopied hands a history that needs no change to
// the model as it is: a long session costs no copy of it per call.
func TestPrepareUnchangedNotCopied(t *testing.T) {
	t.Parallel()
	msgs := []message.Message{message.User("hi", 1),
		{Role: message.RoleAssistant, Provider: "openai", API: "openai-completions", Model: "gpt-4o", StopReason: message.StopStop,
			Content: message.BlocksOf(message.Text("hello"))}}
	res := Prepare(Request{Provider: "openai", API: "openai-completions", ModelID: "gpt-4o", Messages: msgs, Now: testNow})
	if len(res.Final) != 2 || &res.Final[0] != &msgs[0] {
		t.Errorf("an unchanged history was copied: %+v", res.Final)
	}
}
