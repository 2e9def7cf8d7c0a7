package blockchunk

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/ecmatext"
)

func drainAll(c *Chunker, force bool) []string {
	var out []string
	c.Drain(force, func(b string) { out = append(out, b) })
	return out
}

func TestChunker(t *testing.T) {
	t.Parallel()
	type step struct {
		append string
		force  bool
		want   []string
		buffer string
	}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			// Sizes are UTF-16 units: "é" is one unit, so 10 of them reach a
			// minimum of 10 although they are 20 bytes.
			name:  "counts UTF-16 units, not bytes",
			cfg:   Config{MinChars: 10, MaxChars: 12},
			steps: []step{{append: strings.Repeat("é", 9) + " ab", want: []string{strings.Repeat("é", 9) + " ab"}, force: true}},
		},
		{
			// Nine "é" are 9 units (18 bytes): below a minimum of 10.
			name:  "multibyte text below minimum waits",
			cfg:   Config{MinChars: 10, MaxChars: 20},
			steps: []step{{append: strings.Repeat("é", 9), buffer: strings.Repeat("é", 9)}},
		},
		{
			// An emoji is two UTF-16 units; a hard cut at 5 units must not
			// split its surrogate pair, so the first cut moves back before it.
			name: "hard cut never splits a surrogate pair",
			cfg:  Config{MinChars: 1, MaxChars: 5},
			steps: []step{{
				append: "abcd😀efgh",
				want:   []string{"abcd", "😀efg"},
				buffer: "h",
			}},
		},
		{
			// A forced drain of a buffer within MaxChars emits it whole.
			name:  "force emits the whole buffer",
			cfg:   Config{MinChars: 100, MaxChars: 200},
			steps: []step{{append: "tiny", force: true, want: []string{"tiny"}}},
		},
		{
			// A blank buffer is discarded on a forced drain, not emitted.
			name:  "force drops a blank buffer",
			cfg:   Config{MinChars: 1, MaxChars: 10},
			steps: []step{{append: " \n\t ", force: true}},
		},
		{
			// Non-breaking space counts as whitespace (JavaScript \s), so a
			// buffer of it is blank.
			name:  "unicode whitespace is blank",
			cfg:   Config{MinChars: 1, MaxChars: 10},
			steps: []step{{append: "\u00a0\u3000", force: true}},
		},
		{
			// The whitespace at the cut and the newlines after it are
			// consumed; the rest stays buffered.
			name:  "cut consumes one whitespace and leading newlines",
			cfg:   Config{MinChars: 5, MaxChars: 12},
			steps: []step{{append: "hello world\n\n\nnext part", want: []string{"hello world"}, buffer: "next part"}},
		},
		{
			// A forced drain longer than MaxChars cuts repeatedly.
			name:  "forced drain over max cuts repeatedly",
			cfg:   Config{MinChars: 3, MaxChars: 6},
			steps: []step{{append: "aaaa bbbb cccc", force: true, want: []string{"aaaa", "bbbb", "cccc"}}},
		},
		{
			// Fence repair: a hard cut inside a long fenced line closes the
			// fence in the chunk and reopens it (with its info string) in the
			// buffer.
			name: "fence repair keeps the info string",
			cfg:  Config{MinChars: 5, MaxChars: 20},
			steps: []step{{
				append: "```go\n" + strings.Repeat("x", 30) + "\n```",
				want:   []string{"```go\n" + strings.Repeat("x", 14) + "\n```\n", "```go\n" + strings.Repeat("x", 14) + "\n```\n"},
				buffer: "```go\nxx\n```",
			}},
		},
		{
			// Tilde fences are fences too and a backtick line does not close
			// them: the hard cut lands inside, so the fence is repaired.
			name: "tilde fence is not closed by backticks",
			cfg:  Config{MinChars: 5, MaxChars: 14},
			steps: []step{{
				append: "~~~\n```\nab cd\n~~~\n",
				want:   []string{"~~~\n```\nab cd\n~~~\n"},
				buffer: "~~~\n~~~\n",
			}},
		},
		{
			// An opening line as long as the cut would make fence repair grow
			// the buffer forever (the reference never returns); the chunker
			// cuts without repair instead.
			name: "fence repair that cannot shrink the buffer cuts plainly",
			cfg:  Config{MinChars: 1, MaxChars: 5},
			steps: []step{{
				append: "```aaaaaaaa\nbb",
				want:   []string{"```aa", "aaaaa", "a", "bb"},
				force:  true,
			}},
		},
		{
			// Sentence ends count only before whitespace or the end of the
			// window: "3.14" is not a sentence end.
			name:  "decimal point is not a sentence end",
			cfg:   Config{MinChars: 3, MaxChars: 40, BreakPreference: BreakSentence},
			steps: []step{{append: "pi is 3.14 and e is 2.71 ok? more words here and there", want: []string{"pi is 3.14 and e is 2.71 ok?"}, buffer: "more words here and there"}},
		},
		{
			// flushOnParagraph emits each paragraph, dropping blank lines
			// made of spaces and tabs between them.
			name:  "flushOnParagraph with whitespace-only separator line",
			cfg:   Config{MinChars: 100, MaxChars: 200, FlushOnParagraph: true},
			steps: []step{{append: "one\n \t\ntwo\n\nthree", want: []string{"one", "two"}, buffer: "three"}},
		},
		{
			// A leading paragraph break produces no empty block.
			name:  "flushOnParagraph leading break",
			cfg:   Config{MinChars: 100, MaxChars: 200, FlushOnParagraph: true},
			steps: []step{{append: "\n\nabc", buffer: "abc"}},
		},
		{
			// Zero sizes are raised to 1: every word becomes a block.
			name:  "zero sizes are raised to one",
			cfg:   Config{},
			steps: []step{{append: "a b", want: []string{"a", "b"}}},
		},
		{
			// Text appended across drains keeps accumulating until ready.
			name: "incremental appends",
			cfg:  Config{MinChars: 10, MaxChars: 20},
			steps: []step{
				{append: "Hello ", buffer: "Hello "},
				{append: "there. How are", want: []string{"Hello there."}, buffer: "How are"},
				{append: " you?", force: true, want: []string{"How are you?"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := New(tt.cfg)
			for i, st := range tt.steps {
				c.Append(st.append)
				got := drainAll(c, st.force)
				if !slices.Equal(got, st.want) {
					t.Errorf("step %d: emitted %q, want %q", i, got, st.want)
				}
				if c.Buffered() != st.buffer {
					t.Errorf("step %d: buffer %q, want %q", i, c.Buffered(), st.buffer)
				}
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	// The maximum is clamped to the channel limit, and the minimum to it.
	if got := DefaultConfig(500); got.MinChars != 500 || got.MaxChars != 500 {
		t.Errorf("DefaultConfig(500) = %+v", got)
	}
	if got := DefaultConfig(0); got.MinChars != 800 || got.MaxChars != 1200 || got.BreakPreference != BreakParagraph {
		t.Errorf("DefaultConfig(0) = %+v", got)
	}
}

// squeeze removes whitespace, which the chunker may drop at cuts.
func squeeze(s string) string {
	return strings.Map(func(r rune) rune {
		if ecmatext.IsSpace(r) || unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}

func isSubsequence(sub, s string) bool {
	i := 0
	for j := 0; i < len(sub) && j < len(s); j++ {
		if sub[i] == s[j] {
			i++
		}
	}
	return i == len(sub)
}

func FuzzChunker(f *testing.F) {
	f.Add("Para one.\n\nPara two is here.\n\nThree", 5, 20, 0, false, 7)
	f.Add("```js\nconst a = 1;\n\nconst b = 2;\n```\n\nAfter", 3, 12, 1, true, 4)
	f.Add("```\n"+strings.Repeat("y", 70)+"\n```", 5, 30, 2, false, 13)
	f.Add("😀é\u2028 ~~~\n  ```x\n.!? a", 1, 2, 0, false, 1)
	f.Add("```aaaaaaaa\nbb", 1, 5, 0, false, 3)
	f.Fuzz(func(t *testing.T, input string, minChars, maxChars, pref int, flush bool, step int) {
		if !utf8.ValidString(input) {
			return
		}
		minChars, maxChars = minChars%300, maxChars%300
		prefs := []BreakPreference{BreakParagraph, BreakNewline, BreakSentence}
		c := New(Config{MinChars: minChars, MaxChars: maxChars, BreakPreference: prefs[(pref%3+3)%3], FlushOnParagraph: flush})
		step = 1 + (step%64+64)%64
		var out strings.Builder
		limit := max(max(1, minChars), maxChars, 2) // 2: one surrogate pair when MaxChars is 1
		emit := func(b string) {
			if b == "" {
				t.Fatalf("empty block emitted")
			}
			out.WriteString(b)
			// Without its fence repair, no block exceeds MaxChars.
			body := b
			if strings.HasSuffix(body, "\n") {
				trimmed := body[:len(body)-1]
				nl := strings.LastIndexByte(trimmed, '\n')
				if _, _, ok := matchFenceLine(trimmed[nl+1:]); ok && nl >= 0 {
					body = trimmed[:nl]
				}
			}
			if ecmatext.Len(body) > limit {
				t.Fatalf("block of %d units over the limit %d: %q", ecmatext.Len(body), limit, b)
			}
		}
		rest := input
		for rest != "" {
			n := min(step, len(rest))
			for n < len(rest) && !utf8.RuneStart(rest[n]) {
				n++
			}
			c.Append(rest[:n])
			rest = rest[n:]
			c.Drain(false, emit)
		}
		c.Drain(true, emit)
		if c.HasBuffered() {
			t.Fatalf("forced drain left %q", c.Buffered())
		}
		in, got := squeeze(input), squeeze(out.String())
		if !strings.Contains(input, "```") && !strings.Contains(input, "~~~") {
			// No fence, no repair: exactly the input's text, in order.
			if in != got {
				t.Fatalf("text changed:\n in %q\nout %q", in, got)
			}
			return
		}
		// Fence repair only adds fence lines: the input is a subsequence of
		// the output, and everything added is fence markup.
		if !isSubsequence(in, got) {
			t.Fatalf("text lost:\n in %q\nout %q", in, got)
		}
	})
}

func BenchmarkChunker(b *testing.B) {
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<20; i++ {
		fmt.Fprintf(&sb, "Sentence number %d is here, with some words. ", i)
		if i%7 == 6 {
			sb.WriteString("\n\n")
		}
		if i%40 == 39 {
			sb.WriteString("\n```go\nfunc f() {\n\treturn 42\n}\n```\n\n")
		}
	}
	text := sb.String()
	const delta = 64 // a typical streamed text delta
	run := func(b *testing.B, text string, pref BreakPreference) {
		b.SetBytes(int64(len(text)))
		emit := func(string) {}
		for b.Loop() {
			c := New(Config{MinChars: MinCharsDefault, MaxChars: MaxCharsDefault, BreakPreference: pref})
			for i := 0; i < len(text); {
				j := min(i+delta, len(text))
				for j < len(text) && !utf8.RuneStart(text[j]) {
					j++
				}
				c.Append(text[i:j])
				c.Drain(false, emit)
				i = j
			}
			c.Drain(true, emit)
		}
	}
	// Non-ASCII text takes the UTF-16 offset path.
	b.Run("unicode", func(b *testing.B) {
		run(b, strings.ReplaceAll(strings.ReplaceAll(text, "e", "é"), "words", "wörds 😀"), BreakParagraph)
	})
	for _, pref := range []BreakPreference{BreakParagraph, BreakNewline, BreakSentence} {
		b.Run(string(pref), func(b *testing.B) {
			run(b, text, pref)
		})
	}
}
