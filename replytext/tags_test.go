package replytext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStripTags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		enforce bool
		want    string
	}{
		// A closed reasoning block disappears with its content.
		{"think block", "a<think>secret</think>b", false, "ab"},
		// All four tag names are reasoning tags, case-insensitively.
		{"tag names", "1<thinking>x</thinking>2<THOUGHT>y</thought>3<AntThinking>z</antthinking>4", false, "1234"},
		// Whitespace inside the tag is allowed.
		{"spaced tag", "a< think >x< / think >b", false, "ab"},
		// An unclosed block hides everything after it.
		{"unclosed", "visible<think>still thinking", false, "visible"},
		// A stray closing tag is removed; text before it stays.
		{"stray close", "before</think>after", false, "beforeafter"},
		// Unknown tags are text.
		{"other tag", "<thinker>x</thinker>", false, "<thinker>x</thinker>"},
		// Tags inside inline code are text.
		{"inline code", "use `<think>` tags", false, "use `<think>` tags"},
		// Tags inside a fenced block are text.
		{"fenced code", "```\n<think>x</think>\n```\nok", false, "```\n<think>x</think>\n```\nok"},
		// <final> tags are removed, their content kept.
		{"final default", "<final>answer</final>", false, "answer"},
		// With enforceFinal, text outside <final> is dropped.
		{"enforce outside", "chatter<final>answer</final>more", true, "answer"},
		// With enforceFinal and no <final>, nothing is visible.
		{"enforce none", "no tags at all", true, ""},
		// With enforceFinal an unclosed <final> keeps the rest.
		{"enforce unclosed", "x<final>partial", true, "partial"},
		// Reasoning inside <final> is still hidden.
		{"think inside final", "<final>a<think>b</think>c</final>", true, "ac"},
		// A tag assembled around a removed block is removed as well, so the
		// result is stable (the reference leaves "<think>" here).
		{"assembled tag", "<<think>x</think>think>tail", false, ""},
		// A literal "<" that starts no tag stays.
		{"lone angle", "1 < 2 and 3 > 2", false, "1 < 2 and 3 > 2"},
	}
	for _, tt := range tests {
		if got := StripTags(tt.in, tt.enforce); got != tt.want {
			t.Errorf("%s: StripTags(%q, %v) = %q, want %q", tt.name, tt.in, tt.enforce, got, tt.want)
		}
	}
}

func TestStripperAcrossChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		chunks  []string
		enforce bool
		want    []string
	}{
		// A block opened in one chunk hides the next chunks until closed.
		{"block spans chunks", []string{"Hi <think>plan", " more plan", "</think> there"}, false, []string{"Hi ", "", " there"}},
		// An inline code span opened in one chunk protects tags in the next.
		{"inline code spans chunks", []string{"see `code", " <think> here` done"}, false, []string{"see `code", " <think> here` done"}},
		// With enforceFinal, text before <final> is hidden and the final
		// state carries over.
		{"final spans chunks", []string{"noise <final>Ans", "wer</final> noise"}, true, []string{"Ans", "wer"}},
	}
	for _, tt := range tests {
		s := Stripper{EnforceFinal: tt.enforce}
		for i, c := range tt.chunks {
			if got := s.Strip(c); got != tt.want[i] {
				t.Errorf("%s: chunk %d: got %q, want %q", tt.name, i, got, tt.want[i])
			}
		}
	}
}

func TestStripperWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		chunks []string
		want   []string // Write results; the last entry is Flush
	}{
		// A tag split over chunks is held back, then removed.
		{"split tag", []string{"a<th", "ink>b</think>c"}, []string{"a", "c", ""}},
		// A "<" that turns out not to be a tag is released.
		{"not a tag", []string{"x <", "3"}, []string{"x ", "<3", ""}},
		// Flush releases a partial tag as text.
		{"flush partial", []string{"x <thin"}, []string{"x ", "<thin"}},
		// A fence line split over chunks still protects the tags in it.
		{"split fence", []string{"``", "`\n<think>\n```\nok"}, []string{"", "```\n<think>\n```\nok", ""}},
		// Leading spaces of a line wait for the fence check.
		{"line start spaces", []string{"a\n  ", "b"}, []string{"a\n", "  b", ""}},
		// An unclosed inline code span protects tags in later chunks.
		{"inline across", []string{"`x ", "<think> y`<think>z"}, []string{"`x ", "<think> y`", ""}},
	}
	for _, tt := range tests {
		var s Stripper
		for i, c := range tt.chunks {
			if got := s.Write(c); got != tt.want[i] {
				t.Errorf("%s: Write %d = %q, want %q", tt.name, i, got, tt.want[i])
			}
		}
		if got := s.Flush(); got != tt.want[len(tt.want)-1] {
			t.Errorf("%s: Flush = %q, want %q", tt.name, got, tt.want[len(tt.want)-1])
		}
	}
}

func FuzzStripTags(f *testing.F) {
	for _, s := range []string{
		"a<think>secret</think>b", "<<think>x</think>think>tail", "`<think>`", "```\n<think>\n```\n<think>x",
		"<final>a</final>", "< / thought >", "<think><think></think>x", "``a`b``<think>", "\u2028<think\u00a0>",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, in string, enforce bool) {
		if !utf8.ValidString(in) {
			return
		}
		out := StripTags(in, enforce)
		if !enforce {
			if again := StripTags(out, false); again != out {
				t.Fatalf("not idempotent:\n in %q\nout %q\nagain %q", in, out, again)
			}
		}
		// Any chunking gives the same visible text as the whole text.
		whole := (&Stripper{EnforceFinal: enforce}).Strip(in)
		s := Stripper{EnforceFinal: enforce}
		var got strings.Builder
		rest := in
		for len(rest) > 0 {
			n := min(len(rest), 1+len(rest)%7)
			for n < len(rest) && !utf8.RuneStart(rest[n]) {
				n++
			}
			got.WriteString(s.Write(rest[:n]))
			rest = rest[n:]
		}
		got.WriteString(s.Flush())
		if got.String() != whole {
			t.Fatalf("chunking changed the result:\n in %q\nwhole %q\nchunked %q", in, whole, got.String())
		}
	})
}
