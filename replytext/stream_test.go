package replytext

import (
	"strings"
	"testing"
)

func TestAccumulator(t *testing.T) {
	t.Parallel()
	type ev struct{ typ, delta, content, want string }
	tests := []struct {
		name string
		evs  []ev
	}{
		// text_delta contributes its delta.
		{"deltas", []ev{{EventTextDelta, "Hel", "", "Hel"}, {EventTextDelta, "lo", "", "lo"}}},
		// text_end resending the full content adds only the new suffix.
		{"end with full content", []ev{{EventTextDelta, "Hello", "", "Hello"}, {EventTextEnd, "", "Hello world", " world"}}},
		// text_end repeating exactly what we have adds nothing.
		{"end repeats", []ev{{EventTextDelta, "Hello", "", "Hello"}, {EventTextEnd, "", "Hello", ""}}},
		// content that is a prefix of what we have adds nothing.
		{"end shorter", []ev{{EventTextDelta, "Hello", "", "Hello"}, {EventTextEnd, "", "Hel", ""}}},
		// content found inside what we have adds nothing.
		{"end contained", []ev{{EventTextDelta, "Hello", "", "Hello"}, {EventTextEnd, "", "ell", ""}}},
		// unrelated content is added whole.
		{"end unrelated", []ev{{EventTextDelta, "Hello", "", "Hello"}, {EventTextEnd, "", "Bye", "Bye"}}},
		// a delta on text_start/text_end wins over content.
		{"start with delta", []ev{{EventTextStart, "A", "ignored", "A"}}},
		// text_start with content on an empty buffer adds it.
		{"start with content", []ev{{EventTextStart, "", "Hi", "Hi"}}},
		// other events contribute nothing.
		{"other event", []ev{{"thinking_delta", "x", "", ""}}},
	}
	for _, tt := range tests {
		var a Accumulator
		for i, e := range tt.evs {
			if got := a.Add(e.typ, e.delta, e.content); got != e.want {
				t.Errorf("%s: event %d: chunk %q, want %q", tt.name, i, got, e.want)
			}
		}
	}
}

func TestStream(t *testing.T) {
	t.Parallel()
	var s Stream
	s.Reset()
	type step struct {
		delta      string
		text, d    string
		ok         bool
		visibleDel string
	}
	steps := []step{
		// Reasoning at the start is invisible: no update.
		{delta: "<think>hmm", ok: false, visibleDel: ""},
		// Closing it reveals text: first update.
		{delta: "</think>Hello", text: "Hello", d: "Hello", ok: true, visibleDel: "Hello"},
		// Trailing whitespace is trimmed, so no growth yet.
		{delta: " ", ok: false, visibleDel: " "},
		// Growth publishes the delta beyond the last published text.
		{delta: "world", text: "Hello world", d: " world", ok: true, visibleDel: "world"},
	}
	for i, st := range steps {
		_, vd, up, ok := s.Add(EventTextDelta, st.delta, "")
		if ok != st.ok || up.Text != st.text || up.Delta != st.d || vd != st.visibleDel {
			t.Errorf("step %d: got (%q, %+v, %v), want (%q, %q/%q, %v)", i, vd, up, ok, st.visibleDel, st.text, st.d, st.ok)
		}
	}
	// A partial tag at the end of a chunk is held back until decided, so
	// the published text never has to be taken back.
	var r Stream
	if _, _, up, ok := r.Add(EventTextDelta, "a <thi", ""); !ok || up.Text != "a" {
		t.Fatalf("first update %+v %v", up, ok)
	}
	if _, vd, up, ok := r.Add(EventTextDelta, "nk>b", ""); ok || vd != "" {
		t.Errorf("reasoning published: %q %+v", vd, up)
	}
	if _, _, up, ok := r.Add(EventTextDelta, "</think> c", ""); !ok || up.Text != "a  c" || up.Delta != "  c" {
		t.Errorf("after reasoning: %+v %v", up, ok)
	}
}

func TestSilent(t *testing.T) {
	t.Parallel()
	// Exactly the token, whitespace allowed.
	for _, s := range []string{"NO_REPLY", "  NO_REPLY\n"} {
		if !IsSilent(s) {
			t.Errorf("IsSilent(%q) = false", s)
		}
	}
	// Text ending with the token, or a lower-case token, is a reply.
	for _, s := range []string{"Done. NO_REPLY", "no_reply", ""} {
		if IsSilent(s) {
			t.Errorf("IsSilent(%q) = true", s)
		}
	}
}

func TestBlockFilter(t *testing.T) {
	t.Parallel()
	f := BlockFilter{MessagingSent: []string{NormalizeForComparison("Sent to the channel already!")}}
	steps := []struct {
		in   string
		want string
		ok   bool
	}{
		{"Hello there\n\n", "Hello there", true},                                     // trailing newlines trimmed
		{"Hello there", "", false},                                                   // repeat of the previous block
		{"<think>x</think>", "", false},                                              // only reasoning: empty
		{"sent to the CHANNEL already 🎉", "", false},                                 // messaging duplicate (normalised)
		{"[Tool Call: read (ID: 1)]\nArguments: {\"p\": \"]\"}\nNext", "Next", true}, // downgraded tool call removed
	}
	for i, st := range steps {
		got, ok := f.Filter(st.in)
		if got != st.want || ok != st.ok {
			t.Errorf("step %d: Filter(%q) = %q, %v; want %q, %v", i, st.in, got, ok, st.want, st.ok)
		}
	}
}

func TestStripDowngradedToolCallText(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		// Text without markers is returned as is.
		{"plain", "just text [not a tool]", "just text [not a tool]"},
		// A tool call line with one-line arguments.
		{"call one-line args", "a\n[Tool Call: exec (ID: 9)]\nArguments: ls -la\nb", "a\nb"},
		// A tool result runs lazily to the next "[Tool " marker (tool calls
		// are removed first, so only another result can end it).
		{"result to next", "x[Tool Result for ID 1]\nout\n[Tool Result for ID 2]\nmore", "x\n"},
		// A tool result at the end keeps nothing after it.
		{"result to end", "x\n[Tool Result for ID 1]\nout\n\n", "x\n\n\n"},
		// Historical context markers go, case-insensitively.
		{"historical", "[historical CONTEXT: earlier]\nhi", "hi"},
	}
	for _, tt := range tests {
		if got := StripDowngradedToolCallText(tt.in); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestNormalizeForComparison(t *testing.T) {
	t.Parallel()
	if got := NormalizeForComparison("  Hello 👋🏽\n\tWORLD  ✅ "); got != "hello world" {
		t.Errorf("got %q", got)
	}
	// Short texts never count as duplicates.
	if IsMessagingDuplicate("short", []string{"short"}) {
		t.Error("short duplicate")
	}
	if !IsMessagingDuplicate(strings.Repeat("a", 12), []string{strings.Repeat("a", 20)}) {
		t.Error("contained duplicate missed")
	}
}
