package guard

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

func TestResolveWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		provider    string
		modelWindow float64
		cfg         WindowConfig
		wantTokens  int
		wantSource  WindowSource
		warn, block bool
	}{
		// The models config wins over the model's own metadata.
		{"models config first", "p", 64000, WindowConfig{ModelWindows: map[string]map[string]float64{"p": {"m": 20000}}}, 20000, SourceModelsConfig, true, false},
		// A non-positive models-config value is unusable and skipped.
		{"zero models config skipped", "p", 64000, WindowConfig{ModelWindows: map[string]map[string]float64{"p": {"m": 0}}}, 64000, SourceModel, false, false},
		// NaN and infinities are not windows.
		{"nan model window", "p", math.NaN(), WindowConfig{}, DefaultContextTokens, SourceDefault, false, false},
		{"inf model window", "p", math.Inf(1), WindowConfig{}, DefaultContextTokens, SourceDefault, false, false},
		// The agent cap replaces the window only when smaller.
		{"agent cap smaller", "p", 64000, WindowConfig{AgentContextTokens: 10000.7}, 10000, SourceAgentContextTokens, true, true},
		{"agent cap equal", "p", 64000, WindowConfig{AgentContextTokens: 64000}, 64000, SourceModel, false, false},
		// Exactly the hard minimum does not block (strict <).
		{"exactly 16000", "p", 16000, WindowConfig{}, 16000, SourceModel, true, false},
		{"just below 16000", "p", 15999, WindowConfig{}, 15999, SourceModel, true, true},
		// Negative thresholds are raised to 1: nothing warns or blocks.
		{"negative thresholds", "p", 5, WindowConfig{WarnBelowTokens: -3, HardMinTokens: -3}, 5, SourceModel, false, false},
		// A configured default replaces 200k.
		{"custom default", "p", 0, WindowConfig{DefaultTokens: 50000}, 50000, SourceDefault, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := ResolveWindow(tt.provider, "m", tt.modelWindow, tt.cfg)
			if w.Tokens != tt.wantTokens || w.Source != tt.wantSource || w.ShouldWarn != tt.warn || w.ShouldBlock != tt.block {
				t.Errorf("got %+v, want tokens=%d source=%s warn=%v block=%v", w, tt.wantTokens, tt.wantSource, tt.warn, tt.block)
			}
		})
	}
}

func TestWindowErr(t *testing.T) {
	t.Parallel()
	if err := ResolveWindow("p", "m", 32000, WindowConfig{}).Err(); err != nil {
		t.Fatalf("unexpected error %v", err)
	}
	err := ResolveWindow("p", "m", 8000, WindowConfig{}).Err()
	var small *WindowTooSmallError
	if !errors.As(err, &small) || small.Tokens != 8000 {
		t.Fatalf("got %v", err)
	}
	if want := "Model context window too small (8000 tokens). Minimum is 16000."; err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}

func TestTruncateText(t *testing.T) {
	t.Parallel()
	const notice = "[cut]"
	tests := []struct {
		name       string
		text       string
		maxChars   int
		minKeep    int
		wantOut    string
		truncated  bool
		atNewline  bool
		wantOutLen int
	}{
		// A text of exactly maxChars is left alone.
		{"exactly max", "abcde", 5, 1, "abcde", false, false, 5},
		// The floor wins over the budget: the whole text plus the notice
		// comes out longer than the input.
		{"floor keeps everything", strings.Repeat("a", 12), 10, 100, strings.Repeat("a", 12) + notice, true, false, 17},
		// A newline exactly at 80 % of keep is not beyond it: hard cut.
		{"newline at 80 percent", "abcdefgh\nxxxxxxxxxxxx", 15, 1, "abcdefgh\nx" + notice, true, false, 15},
		// A newline past 80 % is used and not kept.
		{"newline past 80 percent", "abcdefghi\nxxxxxxxxxxx", 15, 1, "abcdefghi" + notice, true, true, 14},
		// A surrogate pair (an emoji, 2 units) straddling the cut is not
		// split: the cut moves before it.
		{"no split surrogate pair", "abcdefghi😀zzzzzzz", 15, 1, "abcdefghi" + notice, true, false, 14},
		// Characters of the BMP outside ASCII count one unit each.
		{"bmp counts one", "ééééééééééééééééééé", 15, 1, "éééééééééé" + notice, true, false, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, cut := TruncateText(tt.text, tt.maxChars, TruncateOptions{Notice: notice, MinKeep: tt.minKeep})
			if out != tt.wantOut || cut.Truncated != tt.truncated || cut.CutAtNewline != tt.atNewline || cut.Output != tt.wantOutLen {
				t.Errorf("got %q %+v, want %q truncated=%v atNewline=%v len=%d", out, cut, tt.wantOut, tt.truncated, tt.atNewline, tt.wantOutLen)
			}
			if ecmatext.Len(out) != cut.Output {
				t.Errorf("reported length %d, real %d", cut.Output, ecmatext.Len(out))
			}
		})
	}
}

func FuzzTruncateText(f *testing.F) {
	for _, s := range []string{"", "hello\nworld", "😀😀😀\n😀", strings.Repeat("ab\n", 50), "é\u2028x"} {
		f.Add(s, 10, 3)
	}
	f.Fuzz(func(t *testing.T, text string, maxChars, minKeep int) {
		if maxChars < 0 || maxChars > 1<<16 || minKeep > 1<<16 {
			t.Skip()
		}
		out, cut := TruncateText(text, maxChars, TruncateOptions{Notice: "~", MinKeep: minKeep})
		if !cut.Truncated {
			if out != text {
				t.Fatalf("untruncated output differs")
			}
			return
		}
		kept := strings.TrimSuffix(out, "~")
		if !strings.HasPrefix(text, kept) {
			t.Fatalf("output is not a prefix of the input plus the notice")
		}
		if utf8.ValidString(text) && !utf8.ValidString(out) {
			t.Fatalf("valid input gave invalid output %q", out)
		}
		if ecmatext.Len(kept) != cut.KeptPrefix || ecmatext.Len(out) != cut.Output {
			t.Fatalf("reported lengths %+v do not match %q", cut, out)
		}
	})
}

func TestTruncateContent(t *testing.T) {
	t.Parallel()
	// Images do not count towards the total and are kept.
	c := message.BlocksOf(message.Image("image/png", "AAAA"), message.Text(strings.Repeat("a", 5000)))
	out, cuts, changed := TruncateContent(c, 3000, TruncateOptions{})
	if !changed || len(out.Blocks) != 2 || out.Blocks[0].Type != message.BlockImage {
		t.Fatalf("unexpected result %v %+v", changed, cuts)
	}
	if cuts[0] != (TextCut{}) || !cuts[1].Truncated {
		t.Errorf("cuts %+v", cuts)
	}
	// The input is not modified.
	if len(c.Blocks[1].Text) != 5000 {
		t.Errorf("input modified")
	}
	// A plain string stays a plain string.
	p := message.PlainText(strings.Repeat("b", 5000))
	out, _, _ = TruncateContent(p, 3000, TruncateOptions{})
	if !out.IsPlain() {
		t.Errorf("plain content became blocks")
	}
}

func TestCapForPersistence(t *testing.T) {
	t.Parallel()
	small := message.Message{Role: message.RoleToolResult, ToolCallID: "a", Content: message.BlocksOf(message.Text("ok"))}
	if _, changed := CapForPersistence(small); changed {
		t.Errorf("small result changed")
	}
	big := message.Message{Role: message.RoleToolResult, ToolCallID: "a", Content: message.BlocksOf(message.Text(strings.Repeat("q", HardMaxToolResultChars+1)))}
	out, changed := CapForPersistence(big)
	if !changed || !strings.HasSuffix(out.Content.Text(), PersistenceNotice) || ecmatext.Len(out.Content.Text()) != HardMaxToolResultChars {
		t.Errorf("changed=%v len=%d", changed, ecmatext.Len(out.Content.Text()))
	}
	// Only tool results are capped.
	user := message.User(strings.Repeat("u", HardMaxToolResultChars+1), 0)
	if _, changed := CapForPersistence(user); changed {
		t.Errorf("user message capped")
	}
}

func toolResult(id, text string, details any) message.Message {
	return message.Message{Role: message.RoleToolResult, ToolCallID: id, Content: message.BlocksOf(message.Text(text)), Details: details}
}

func TestGuardContext(t *testing.T) {
	t.Parallel()
	t.Run("fits returns the input", func(t *testing.T) {
		t.Parallel()
		in := []message.Message{message.User("hi", 0), toolResult("1", "small", map[string]any{"k": 1})}
		out, res := GuardContext(in, 100000)
		if res.Changed || &out[0] != &in[0] {
			t.Errorf("unexpected change")
		}
	})
	t.Run("over weighted budget but raw text fits loses details", func(t *testing.T) {
		t.Parallel()
		// 600 chars weigh 1200 > 1024 but 600 ≤ 1024: text kept, details dropped.
		in := []message.Message{toolResult("1", strings.Repeat("a", 600), map[string]any{"k": 1})}
		out, res := GuardContext(in, 1000)
		if res.Messages[0].Outcome != OutcomeUnchanged || !res.Messages[0].DetailsRemoved || out[0].Details != nil {
			t.Errorf("got %+v", res.Messages[0])
		}
		if in[0].Details == nil {
			t.Errorf("input modified")
		}
	})
	t.Run("image only result becomes the notice", func(t *testing.T) {
		t.Parallel()
		m := message.Message{Role: message.RoleToolResult, ToolCallID: "1", Content: message.BlocksOf(message.Image("image/png", "AAAA"))}
		out, res := GuardContext([]message.Message{m}, 1000)
		// The bare notice, without the newline that precedes it after a
		// cut text.
		if res.Messages[0].Outcome != OutcomeNoticeOnly || out[0].Content.Text() != "[truncated: output exceeded context limit]" ||
			out[0].Content.IsPlain() {
			t.Errorf("got %+v %q", res.Messages[0], out[0].Content.Text())
		}
	})
	t.Run("cut moves back to a newline past 70 percent", func(t *testing.T) {
		t.Parallel()
		text := strings.Repeat("x", 900) + "\n" + strings.Repeat("y", 2000)
		out, res := GuardContext([]message.Message{toolResult("1", text, nil)}, 1000)
		if res.Messages[0].Outcome != OutcomeTruncated || res.Messages[0].KeptPrefix != 900 {
			t.Errorf("got %+v", res.Messages[0])
		}
		if got := out[0].Content.Text(); got != strings.Repeat("x", 900)+ContextNotice {
			t.Errorf("got %q…", got[:20])
		}
	})
	t.Run("legacy tool message with content in Extra", func(t *testing.T) {
		t.Parallel()
		m := message.Message{Role: RoleLegacyTool, Extra: map[string]any{"content": strings.Repeat("z", 3000), "toolCallId": "x"}}
		out, res := GuardContext([]message.Message{message.User(strings.Repeat("u", 2500), 0), m}, 1000)
		if res.Messages[1].Outcome != OutcomeCompacted {
			t.Fatalf("got %+v", res.Messages[1])
		}
		if got, _ := out[1].Extra["content"].(string); got != CompactedPlaceholder {
			t.Errorf("content %q", got)
		}
		if s, _ := m.Extra["content"].(string); len(s) != 3000 {
			t.Errorf("input modified")
		}
	})
	t.Run("assistant tool call arguments count", func(t *testing.T) {
		t.Parallel()
		a := message.Message{Role: message.RoleAssistant, Content: message.BlocksOf(
			message.Text("ab"), message.Thinking("cd", ""), message.ToolCall("1", "read", map[string]any{"p": "<&>"}))}
		if got, want := EstimateChars(a), 2+2+len(`{"p":"<&>"}`); got != want {
			t.Errorf("estimate %d, want %d", got, want)
		}
		if got := EstimateChars(message.Message{Role: "custom"}); got != 256 {
			t.Errorf("other role estimate %d", got)
		}
	})
}

func TestToolResultsOverflowPass(t *testing.T) {
	t.Parallel()
	big := toolResult("1", strings.Repeat("x", 30000), nil)
	in := []message.Message{message.User("hi", 0), big, toolResult("2", "ok", nil)}
	if !HasOversizedToolResult(in, 16000) {
		t.Fatal("19200-char limit should flag a 30000-char result")
	}
	out, res := TruncateToolResults(in, 16000)
	if res.Truncated != 1 || res.PerMessage[0] != nil || !res.PerMessage[1][0].Truncated {
		t.Fatalf("got %+v", res)
	}
	if ecmatext.Len(out[1].Content.Text()) != MaxToolResultChars(16000) || ecmatext.Len(in[1].Content.Text()) != 30000 {
		t.Errorf("lengths wrong or input modified")
	}
	// Nothing to do returns the input slice.
	small := []message.Message{toolResult("1", "ok", nil)}
	if out, res := TruncateToolResults(small, 16000); res.Truncated != 0 || &out[0] != &small[0] {
		t.Errorf("unexpected copy")
	}
	// Huge windows are capped at the hard maximum.
	if got := MaxToolResultChars(10_000_000); got != HardMaxToolResultChars {
		t.Errorf("max chars %d", got)
	}
}

// TestEstimateDetails: a tool result's details count toward its estimate
// as the reference's estimateUnknownChars counts them (runtime spec §11.2):
// a string by its length, anything else by its JSON, then doubled with the
// rest of the result; other content blocks count by their JSON too.
func TestEstimateDetails(t *testing.T) {
	t.Parallel()
	res := func(details any, blocks ...message.Block) message.Message {
		return message.Message{Role: message.RoleToolResult, ToolCallID: "1", Content: message.BlocksOf(blocks...), Details: details}
	}
	text := message.Text("abcd") // 4
	tests := []struct {
		name string
		m    message.Message
		want int
	}{
		{"no details", res(nil, text), 8},
		{"a string: its length, unquoted", res("hello", text), (4 + 5) * 2},
		{"a string with a quote: still its length", res(`say "hi"`, text), (4 + 8) * 2},
		{"a number", res(float64(42), text), (4 + 2) * 2},
		{"an object: its JSON", res(map[string]any{"exitCode": float64(0)}, text), (4 + len(`{"exitCode":0}`)) * 2},
		{"an array", res([]any{"a", true}, text), (4 + len(`["a",true]`)) * 2},
		{"an image and details", res(map[string]any{}, message.Image("image/png", "AAAA")), (8000 + 2) * 2},
		{"a block of another type: its JSON", res(nil, message.ToolCall("x", "y", map[string]any{})),
			2 * jsonLen(message.ToolCall("x", "y", map[string]any{}))},
	}
	for _, tt := range tests {
		if got := EstimateChars(tt.m); got != tt.want {
			t.Errorf("%s: estimate %d, want %d", tt.name, got, tt.want)
		}
	}
	// Details can tip a result over the single-result budget: it is then
	// rebuilt without them, its text kept.
	m := res(strings.Repeat("d", 600), message.Text("short"))
	out, r := GuardContext([]message.Message{m}, 1000)
	if r.Messages[0].Outcome != OutcomeUnchanged || !r.Messages[0].DetailsRemoved || out[0].Details != nil || out[0].Content.Text() != "short" {
		t.Errorf("details over budget: %+v %+v", r.Messages[0], out[0])
	}
	// Pass 2 drops details with the content it compacts; an empty block
	// list stays a block list.
	empty := message.Message{Role: message.RoleToolResult, ToolCallID: "2", Content: message.BlocksOf([]message.Block{}...), Details: strings.Repeat("x", 3000)}
	out, r = GuardContext([]message.Message{message.User(strings.Repeat("u", 2000), 0), empty}, 1000)
	if out[1].Content.IsPlain() || out[1].Details != nil || r.Messages[1].Outcome != OutcomeNoticeOnly {
		t.Errorf("empty block list with details: %+v %+v", r.Messages[1], out[1])
	}
}
