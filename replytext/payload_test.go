package replytext

import (
	"reflect"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// TestErrorEchoRepeats: after an errored assistant, a text that is the
// error again — as the user sees it, generic, raw, formatted, normalised,
// or any provider error payload — repeats it; without an error nothing
// does.
func TestErrorEchoRepeats(t *testing.T) {
	t.Parallel()
	raw := `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	errored := PayloadInput{
		LastAssistant:     &message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: " " + raw + " "},
		ErrorText:         "The AI service is overloaded.",
		FormattedRawError: "529 Overloaded",
	}
	fine := PayloadInput{LastAssistant: &message.Message{Role: message.RoleAssistant, StopReason: message.StopStop}, ErrorText: "x"}
	for _, tc := range []struct {
		name string
		in   PayloadInput
		text string
		want bool
	}{
		{"the error text", errored, "The AI service is overloaded.", true},
		{"the error text normalised", errored, "  the AI   service is OVERLOADED. ", true},
		{"the generic text", errored, GenericErrorText, true},
		{"the raw error", errored, raw, true},
		{"the raw error behind a prefix", errored, `Error: {"error":{"type":"overloaded_error","message":"Overloaded"}}`, true},
		{"the formatted error", errored, "529 Overloaded", true},
		{"another provider error", errored, `{"error":{"type":"rate_limit_error","message":"slow"}}`, true},
		{"an answer", errored, "Here is the answer.", false},
		{"blank", errored, "  ", false},
		{"no error", fine, GenericErrorText, false},
		{"no last assistant", PayloadInput{ErrorText: "x"}, "x", false},
	} {
		if got := newErrorEcho(tc.in).repeats(tc.text); got != tc.want {
			t.Errorf("%s: repeats %q = %v, want %v", tc.name, tc.text, got, tc.want)
		}
	}
}

// TestAppendAnswers: the streamed texts, else the last assistant's text;
// echoes of the error and items left empty by their directives are
// dropped, in order after what items held.
func TestAppendAnswers(t *testing.T) {
	t.Parallel()
	final := &message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Content: message.BlocksOf(message.Text("fallback"))}
	errored := &message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: "boom"}
	media := func(s string) Reply {
		switch s {
		case "[[media]]":
			return Reply{MediaURLs: []string{"a.png"}}
		case "[[voice]]":
			return Reply{AudioAsVoice: true}
		case "[[nothing]]":
			return Reply{}
		}
		return Reply{Text: s}
	}
	for _, tc := range []struct {
		name string
		in   PayloadInput
		want []string // texts, "media" and "voice" for items without
	}{
		{"streamed texts", PayloadInput{AssistantTexts: []string{"a", "b"}, LastAssistant: final}, []string{"a", "b"}},
		{"the last assistant's text", PayloadInput{LastAssistant: final}, []string{"fallback"}},
		{"none", PayloadInput{}, nil},
		{"an echo of the error dropped", PayloadInput{AssistantTexts: []string{"boom", "ok"}, LastAssistant: errored}, []string{"ok"}},
		{"directives", PayloadInput{AssistantTexts: []string{"[[media]]", "[[voice]]", "[[nothing]]", "t"}, Directives: media}, []string{"media", "voice", "t"}},
		{"blank kept for the payloads to drop", PayloadInput{AssistantTexts: []string{" "}}, []string{" "}},
	} {
		items := appendAnswers([]payloadItem{{Reply: Reply{Text: "first"}, isError: true}}, tc.in)
		var got []string
		for _, it := range items[1:] {
			switch {
			case it.isError:
				got = append(got, "error!")
			case len(it.MediaURLs) > 0:
				got = append(got, "media")
			case it.AudioAsVoice && it.Text == "":
				got = append(got, "voice")
			default:
				got = append(got, it.Text)
			}
		}
		if items[0].Text != "first" || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestToolErrorWarning: when the last tool error is warned about, and in
// what words.
func TestToolErrorWarning(t *testing.T) {
	t.Parallel()
	reply := []payloadItem{{Reply: Reply{Text: "done"}}}
	toolUse := &message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse}
	read := &ToolError{Name: "read", Meta: "a.txt", Error: "ENOENT"}
	for _, tc := range []struct {
		name  string
		in    PayloadInput
		items []payloadItem
		want  string // "" for none
	}{
		{"no tool error", PayloadInput{}, nil, ""},
		{"no reply", PayloadInput{LastToolError: read}, nil, "⚠️ read: a.txt failed"},
		{"a summary", PayloadInput{LastToolError: &ToolError{Name: "read", Summary: "read ~/a.txt", Error: "x"}}, nil, "⚠️ read ~/a.txt failed"},
		{"verbose adds the error", PayloadInput{Verbose: true, LastToolError: read}, nil, "⚠️ read: a.txt failed: ENOENT"},
		{"a reply hides it", PayloadInput{LastToolError: read}, reply, ""},
		{"items while calling tools are no reply", PayloadInput{LastToolError: read, LastAssistant: toolUse}, reply, "⚠️ read: a.txt failed"},
		{"recoverable", PayloadInput{LastToolError: &ToolError{Name: "read", Error: "Path MUST BE absolute"}}, nil, ""},
		{"suppressed for non-mutating", PayloadInput{SuppressToolErrors: true, LastToolError: read}, nil, ""},
		{"mutating despite a reply", PayloadInput{LastToolError: &ToolError{Name: "write", Error: "path is required", Mutating: true}}, reply, "⚠️ write failed"},
		{"all warnings suppressed", PayloadInput{SuppressToolErrorWarnings: true, LastToolError: &ToolError{Name: "write", Mutating: true}}, nil, ""},
		{"exec quiet", PayloadInput{LastToolError: &ToolError{Name: " Exec ", Error: "exit 1"}}, nil, ""},
		{"bash verbose", PayloadInput{Verbose: true, LastToolError: &ToolError{Name: "bash", Error: "exit 1"}}, nil, "⚠️ bash failed: exit 1"},
		{"sessions_send never", PayloadInput{Verbose: true, LastToolError: &ToolError{Name: "sessions_send", Mutating: true}}, nil, ""},
		{"not twice", PayloadInput{LastToolError: read}, []payloadItem{{Reply: Reply{Text: " ⚠️ read: a.txt failed "}, isError: true}}, ""},
	} {
		got, ok := toolErrorWarning(tc.in, tc.items)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: %q %v, want %q", tc.name, got, ok, tc.want)
		}
	}
}

// TestPayloads: items become payloads trimmed, with their first media URL,
// audio as voice spread to every item with media, and empty or NO_REPLY
// items dropped.
func TestPayloads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		items []payloadItem
		want  []Payload
	}{
		{"trimmed", []payloadItem{{Reply: Reply{Text: " a \n"}}, {Reply: Reply{Text: "e"}, isError: true}}, []Payload{{Text: "a"}, {Text: "e", IsError: true}}},
		{"media", []payloadItem{{Reply: Reply{MediaURLs: []string{"a.png", "b.png"}, ReplyToID: "m1"}}},
			[]Payload{{MediaURL: "a.png", MediaURLs: []string{"a.png", "b.png"}, ReplyToID: "m1"}}},
		{"audio spreads to media", []payloadItem{{Reply: Reply{Text: "v", AudioAsVoice: true}}, {Reply: Reply{MediaURLs: []string{"a.ogg"}}}, {Reply: Reply{Text: "t"}}},
			[]Payload{{Text: "v", AudioAsVoice: true}, {MediaURL: "a.ogg", MediaURLs: []string{"a.ogg"}, AudioAsVoice: true}, {Text: "t"}}},
		{"empty and silent dropped", []payloadItem{{Reply: Reply{Text: " "}}, {Reply: Reply{Text: " NO_REPLY "}}, {Reply: Reply{MediaURLs: []string{}}}}, []Payload{}},
	} {
		if got := payloads(tc.items); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}
