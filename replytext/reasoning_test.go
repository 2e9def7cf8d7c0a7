package replytext

import (
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

func TestFormatReasoning(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},                               // nothing to show
		{" \n\t ", ""},                         // blank
		{"one line", "Reasoning:\n_one line_"}, // single line
		{"a\n\nb\n", "Reasoning:\n_a_\n\n_b_"}, // blank lines stay unwrapped
	}
	for _, tt := range tests {
		if got := FormatReasoning(tt.in); got != tt.want {
			t.Errorf("FormatReasoning(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	m := &message.Message{Content: message.BlocksOf(message.Thinking(" first ", ""), message.Text("x"), message.Thinking("  ", ""), message.Thinking("second", ""))}
	if got := Thinking(m); got != "first\nsecond" {
		t.Errorf("Thinking = %q", got)
	}
}

func TestToolErrors(t *testing.T) {
	t.Parallel()
	var te ToolErrors
	// A read failure is forgotten after any success.
	te.Record(ToolError{Name: "read", Error: "ENOENT"}, "read:a", true)
	te.Record(ToolError{Name: "ls"}, "ls", false)
	if te.Last() != nil {
		t.Fatal("non-mutating failure stuck")
	}
	// A write failure sticks through other successes...
	te.Record(ToolError{Name: "write", Error: "EACCES", Mutating: true}, "write:/etc/x", true)
	te.Record(ToolError{Name: "read"}, "read:b", false)
	if l := te.Last(); l == nil || l.Name != "write" {
		t.Fatalf("mutating failure lost: %+v", l)
	}
	// ...until the same action succeeds.
	te.Record(ToolError{Name: "write", Mutating: true}, "write:/etc/x", false)
	if te.Last() != nil {
		t.Fatal("mutating failure not cleared by the same action")
	}
}

func TestReasoningStream(t *testing.T) {
	t.Parallel()
	var r ReasoningStream
	// First text: everything is new.
	if text, d, ok := r.Update("think"); !ok || text != "Reasoning:\n_think_" || d != text {
		t.Errorf("first: %q %q %v", text, d, ok)
	}
	// Unchanged: nothing to publish.
	if _, _, ok := r.Update(" think "); ok {
		t.Error("unchanged published")
	}
	// A grown line rewrites the closing underscore, so the whole text is
	// the delta.
	if text, d, ok := r.Update("thinking"); !ok || d != text {
		t.Errorf("rewrite: %q %q %v", text, d, ok)
	}
	// A new line extends the text: only the tail is new.
	if _, d, ok := r.Update("thinking\nmore"); !ok || d != "\n_more_" {
		t.Errorf("extend: %q %v", d, ok)
	}
}
