package replytext

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

func TestTruncateToolText(t *testing.T) {
	t.Parallel()
	// At the cap nothing changes.
	if s := strings.Repeat("a", 8000); TruncateToolText(s) != s {
		t.Error("8000 changed")
	}
	// One over: 8000 units kept plus the marker.
	if got := TruncateToolText(strings.Repeat("a", 8001)); got != strings.Repeat("a", 8000)+"\n…(truncated)…" {
		t.Errorf("8001: len %d", len(got))
	}
	// Emoji count two units; the cut never splits one.
	got := TruncateToolText("a" + strings.Repeat("😀", 4000))
	if got != "a"+strings.Repeat("😀", 3999)+ToolTruncatedSuffix {
		t.Errorf("emoji cut: %d units", ecmatext.Len(got))
	}
}

func TestSanitizeToolResult(t *testing.T) {
	t.Parallel()
	in := map[string]any{
		"content": []any{
			map[string]any{"type": "text", "text": strings.Repeat("x", 9000)},
			map[string]any{"type": "image", "data": "QUJD", "mimeType": "image/png"},
			map[string]any{"type": "image"},
			"odd",
		},
		"details": map[string]any{"k": 1},
	}
	out := SanitizeToolResult(in).(map[string]any)
	c := out["content"].([]any)
	// Text capped.
	if txt := c[0].(map[string]any)["text"].(string); !strings.HasSuffix(txt, ToolTruncatedSuffix) || ecmatext.Len(txt) != 8000+ecmatext.Len(ToolTruncatedSuffix) {
		t.Errorf("text not capped: %d", ecmatext.Len(txt))
	}
	// Image data replaced by its size and an omitted flag.
	if want := (map[string]any{"type": "image", "mimeType": "image/png", "bytes": 4, "omitted": true}); !reflect.DeepEqual(c[1], want) {
		t.Errorf("image = %v", c[1])
	}
	// An image without data has no bytes.
	if want := (map[string]any{"type": "image", "omitted": true}); !reflect.DeepEqual(c[2], want) {
		t.Errorf("empty image = %v", c[2])
	}
	// Non-object items and other fields pass through; the input is not
	// modified.
	if c[3] != "odd" || out["details"] == nil || in["content"].([]any)[1].(map[string]any)["data"] != "QUJD" {
		t.Error("passthrough or copy broken")
	}
	// Non-objects are returned as they are.
	if SanitizeToolResult("x") != "x" {
		t.Error("string changed")
	}
}

func TestToolErrorMessage(t *testing.T) {
	t.Parallel()
	dec := func(s string) any {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		// details.error wins.
		{"details error", `{"details":{"error":"boom\nstack"},"error":"root"}`, "boom", true},
		// details.status that looks like an error.
		{"details status", `{"details":{"status":"timed_out"}}`, "timed_out", true},
		// A success status is not an error; falls through to the text.
		{"ok status", `{"details":{"status":"completed"},"content":[{"type":"text","text":"  first\r\nsecond"}]}`, "first", true},
		// Root message field.
		{"root message", `{"message":{"message":"nested"}}`, "nested", true},
		// JSON text with an error field.
		{"json text", `{"content":[{"type":"text","text":"{\"error\":\"from json\"}"}]}`, "from json", true},
		// Nothing at all.
		{"empty", `{"content":[]}`, "", false},
	}
	for _, tt := range tests {
		got, ok := ToolErrorMessage(dec(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: got %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	// The first line is capped at 400 units plus "…".
	long, _ := ToolErrorText(strings.Repeat("e", 500))
	if long != strings.Repeat("e", 400)+"…" {
		t.Errorf("long error: %d", len(long))
	}
}

func TestBuildPayloads(t *testing.T) {
	t.Parallel()
	errored := &message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}
	toolUse := &message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse}
	final := &message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Content: message.BlocksOf(message.Text("fallback answer"))}
	tests := []struct {
		name string
		in   PayloadInput
		want []Payload
	}{
		// Order: error, answers.
		{"order", PayloadInput{AssistantTexts: []string{" answer "}, ErrorText: "⚠️ Overloaded", LastAssistant: final},
			[]Payload{{Text: "⚠️ Overloaded", IsError: true}, {Text: "answer"}}},
		// Without streamed texts the last assistant's text is the answer.
		{"fallback text", PayloadInput{LastAssistant: final}, []Payload{{Text: "fallback answer"}}},
		// Texts repeating the error (raw JSON, generic text) are dropped.
		{"error repeats", PayloadInput{AssistantTexts: []string{errored.ErrorMessage, GenericErrorText, "real"}, ErrorText: "The AI service is overloaded.", LastAssistant: errored},
			[]Payload{{Text: "The AI service is overloaded.", IsError: true}, {Text: "real"}}},
		// Repeats are kept when the last assistant did not error.
		{"no error no suppression", PayloadInput{AssistantTexts: []string{GenericErrorText}, LastAssistant: final}, []Payload{{Text: GenericErrorText}}},
		// NO_REPLY and blank items are dropped.
		{"silent", PayloadInput{AssistantTexts: []string{" NO_REPLY ", "  ", "ok"}}, []Payload{{Text: "ok"}}},
		// A tool error with no reply is reported.
		{"tool error", PayloadInput{LastAssistant: toolUse, LastToolError: &ToolError{Name: "read", Meta: "a.txt", Error: "ENOENT"}},
			[]Payload{{Text: "⚠️ read: a.txt failed", IsError: true}}},
		// Verbose adds the error text.
		{"tool error verbose", PayloadInput{Verbose: true, LastToolError: &ToolError{Name: "exec", Error: "exit 1"}},
			[]Payload{{Text: "⚠️ exec failed: exit 1", IsError: true}}},
		// exec failures are silent unless verbose.
		{"exec quiet", PayloadInput{LastToolError: &ToolError{Name: "exec", Error: "exit 1"}}, []Payload{}},
		// sessions_send failures are never reported.
		{"sessions_send", PayloadInput{Verbose: true, LastToolError: &ToolError{Name: "sessions_send", Error: "x"}}, []Payload{}},
		// Recoverable errors are not reported.
		{"recoverable", PayloadInput{LastToolError: &ToolError{Name: "read", Error: "path is required"}}, []Payload{}},
		// With a user-facing reply, a non-mutating failure is not reported...
		{"reply hides", PayloadInput{AssistantTexts: []string{"done"}, LastAssistant: final, LastToolError: &ToolError{Name: "read", Error: "ENOENT"}}, []Payload{{Text: "done"}}},
		// ...but a mutating one is.
		{"mutating", PayloadInput{AssistantTexts: []string{"done"}, LastAssistant: final, LastToolError: &ToolError{Name: "write", Error: "EACCES", Mutating: true}},
			[]Payload{{Text: "done"}, {Text: "⚠️ write failed", IsError: true}}},
		// The config switch hides non-mutating warnings.
		{"suppressed", PayloadInput{SuppressToolErrors: true, LastToolError: &ToolError{Name: "read", Error: "ENOENT"}}, []Payload{}},
		// Directives: media and audio-as-voice propagate to media items.
		{"directives", PayloadInput{AssistantTexts: []string{"pic", "voice"}, Directives: func(s string) Reply {
			if s == "pic" {
				return Reply{Text: "here", MediaURLs: []string{"a.png", "b.png"}}
			}
			return Reply{Text: s, AudioAsVoice: true}
		}}, []Payload{{Text: "here", MediaURL: "a.png", MediaURLs: []string{"a.png", "b.png"}, AudioAsVoice: true}, {Text: "voice", AudioAsVoice: true}}},
	}
	for _, tt := range tests {
		got := BuildPayloads(tt.in)
		if len(got) == 0 && len(tt.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}
