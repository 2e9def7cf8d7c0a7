package ecmatext

import (
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func TestIsSpace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r    rune
		want bool
	}{
		{' ', true},       // ASCII space
		{'\t', true},      // tab
		{'\n', true},      // line feed
		{'\v', true},      // vertical tab
		{'\f', true},      // form feed
		{'\r', true},      // carriage return
		{0x00A0, true},    // no-break space
		{0x1680, true},    // ogham space mark
		{0x2000, true},    // en quad: first of the U+2000..U+200A run
		{0x200A, true},    // hair space: last of the run
		{0x200B, false},   // zero width space is not white space in JavaScript
		{0x2028, true},    // line separator
		{0x2029, true},    // paragraph separator
		{0x202F, true},    // narrow no-break space
		{0x205F, true},    // medium mathematical space
		{0x3000, true},    // ideographic space
		{0xFEFF, true},    // byte order mark: space in JavaScript, not in unicode.IsSpace
		{0x0085, false},   // NEL: space in unicode.IsSpace, not in JavaScript
		{'a', false},      // a letter
		{0, false},        // NUL
		{0x1F600, false},  // an emoji
		{0xFFFD, false},   // the replacement character invalid UTF-8 decodes to
		{0x1FFFFF, false}, // beyond Unicode
	}
	for _, tt := range tests {
		if got := IsSpace(tt.r); got != tt.want {
			t.Errorf("IsSpace(%U) = %v, want %v", tt.r, got, tt.want)
		}
	}
}

func TestTrim(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s, trim, start, end string
		blank               bool
	}{
		{"", "", "", "", true},                              // empty
		{"abc", "abc", "abc", "abc", false},                 // fast path: nothing to trim
		{"  a b  ", "a b", "a b  ", "  a b", false},         // inner space kept
		{" \t\n\r\v\f", "", "", "", true},                   // only ASCII space
		{"\u00a0x\u3000", "x", "x\u3000", "\u00a0x", false}, // non-ASCII space
		{"\ufeffx\ufeff", "x", "x\ufeff", "\ufeffx", false}, // BOM is trimmed
		{"\u200bx", "\u200bx", "\u200bx", "\u200bx", false}, // zero width space is not
		{"\u0085x", "\u0085x", "\u0085x", "\u0085x", false}, // nor is NEL
		{"é", "é", "é", "é", false},                         // non-ASCII at both ends, nothing to trim
		{"\xff ", "\xff", "\xff ", "\xff", false},           // invalid UTF-8 is not space
		{"\u2028\u2029", "", "", "", true},                  // line and paragraph separators
	}
	for _, tt := range tests {
		if got := Trim(tt.s); got != tt.trim {
			t.Errorf("Trim(%q) = %q, want %q", tt.s, got, tt.trim)
		}
		if got := TrimStart(tt.s); got != tt.start {
			t.Errorf("TrimStart(%q) = %q, want %q", tt.s, got, tt.start)
		}
		if got := TrimEnd(tt.s); got != tt.end {
			t.Errorf("TrimEnd(%q) = %q, want %q", tt.s, got, tt.end)
		}
		if got := IsBlank(tt.s); got != tt.blank {
			t.Errorf("IsBlank(%q) = %v, want %v", tt.s, got, tt.blank)
		}
	}
}

func TestLen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s     string
		n     int
		ascii bool
	}{
		{"", 0, true},              // empty
		{"hello", 5, true},         // ASCII: one unit a byte
		{"é", 1, false},            // two bytes, one unit
		{"€", 1, false},            // three bytes, one unit
		{"\uffff", 1, false},       // last BMP code point, one unit
		{"😀", 2, false},            // supplementary: a surrogate pair
		{"\U00010000", 2, false},   // first supplementary code point
		{"a😀b", 4, false},          // mixed
		{"\xff", 1, false},         // an invalid byte counts as one U+FFFD
		{"\xf0\x9f\x98", 3, false}, // a truncated 4-byte sequence: one unit per byte
		{"\xed\xa0\x80", 3, false}, // an encoded surrogate is invalid UTF-8: three units
	}
	for _, tt := range tests {
		if got := Len(tt.s); got != tt.n {
			t.Errorf("Len(%q) = %d, want %d", tt.s, got, tt.n)
		}
		if n, ascii := LenASCII(tt.s); n != tt.n || ascii != tt.ascii {
			t.Errorf("LenASCII(%q) = %d, %v, want %d, %v", tt.s, n, ascii, tt.n, tt.ascii)
		}
	}
}

func TestRuneLen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r    rune
		want int
	}{
		{'a', 1},      // ASCII
		{0xFFFF, 1},   // last BMP code point
		{0x10000, 2},  // first supplementary code point
		{0x10FFFF, 2}, // last code point
		{0xFFFD, 1},   // what invalid bytes decode to
		{0xD800, 1},   // a lone surrogate (not decodable from UTF-8) is one unit
		{0x110000, 2}, // beyond Unicode: not -1 as in unicode/utf16
	}
	for _, tt := range tests {
		if got := RuneLen(tt.r); got != tt.want {
			t.Errorf("RuneLen(%U) = %d, want %d", tt.r, got, tt.want)
		}
	}
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		n    int
		want string
		off  int
	}{
		{"", 5, "", 0},            // empty
		{"hello", 0, "", 0},       // zero
		{"hello", -3, "", 0},      // negative clamps to 0
		{"hello", 3, "hel", 3},    // ASCII cut
		{"hello", 5, "hello", 5},  // exact fit
		{"hello", 99, "hello", 5}, // longer than s clamps to len(s)
		{"a😀b", 1, "a", 1},        // before the pair
		{"a😀b", 2, "a", 1},        // inside the pair: moved back, never split
		{"a😀b", 3, "a😀", 5},       // after the pair
		{"é€", 1, "é", 2},         // multi-byte BMP runes are one unit each
		{"\xffab", 2, "\xffa", 2}, // an invalid byte is one unit
	}
	for _, tt := range tests {
		if got := Prefix(tt.s, tt.n); got != tt.want {
			t.Errorf("Prefix(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
		if got := ByteOffset(tt.s, tt.n); got != tt.off {
			t.Errorf("ByteOffset(%q, %d) = %d, want %d", tt.s, tt.n, got, tt.off)
		}
	}
}

func TestLastIndexByte(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		u    int
		want int
	}{
		{"", 0, -1},        // empty
		{"a\nb\nc", 10, 3}, // past the end: the last one
		{"a\nb\nc", 3, 3},  // at u exactly
		{"a\nb\nc", 2, 1},  // before u
		{"a\nb\nc", 0, -1}, // none at or before u
		{"\nabc", 0, 0},    // at index 0
		{"\nabc", -1, -1},  // negative u: -1 (JavaScript would clamp to 0 and return 0)
		{"😀\n", 2, 2},      // after a surrogate pair: UTF-16 index, not byte index
		{"😀\n", 1, -1},     // u inside the pair
		{"é\né\n", 3, 3},   // after multi-byte BMP runes: one unit each
		{"é\né\n", 2, 1},   // the earlier one
		{"abc", 5, -1},     // not present
	}
	for _, tt := range tests {
		if got := LastIndexByte(tt.s, '\n', tt.u); got != tt.want {
			t.Errorf("LastIndexByte(%q, '\\n', %d) = %d, want %d", tt.s, tt.u, got, tt.want)
		}
	}
	// A non-ASCII byte is never found, even where it occurs inside a rune.
	if got := LastIndexByte("é", "é"[1], 5); got != -1 {
		t.Errorf("LastIndexByte of a continuation byte = %d, want -1", got)
	}
}

// units is the reference: s as a JavaScript string (UTF-16 code units),
// each invalid byte decoded to U+FFFD as []rune does.
func units(s string) []uint16 { return utf16.Encode([]rune(s)) }

func FuzzJSText(f *testing.F) {
	for _, s := range []string{"", "abc", " a\u3000", "a😀b", "\xff\xfe", "\ufeff\n\u2028x\n", "é€😀\n"} {
		f.Add(s, 2)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		u := units(s)
		if got := Len(s); got != len(u) {
			t.Fatalf("Len(%q) = %d, want %d", s, got, len(u))
		}
		if _, ascii := LenASCII(s); ascii != (strings.IndexFunc(s, func(r rune) bool { return r >= utf8.RuneSelf }) < 0) {
			t.Fatalf("LenASCII(%q) ascii = %v", s, ascii)
		}

		// Prefix: a rune-aligned prefix of at most n units, and the next
		// rune would not fit.
		p := Prefix(s, n)
		if !strings.HasPrefix(s, p) || ByteOffset(s, n) != len(p) {
			t.Fatalf("Prefix(%q, %d) = %q, not a prefix at ByteOffset", s, n, p)
		}
		if Len(p) > max(n, 0) {
			t.Fatalf("Prefix(%q, %d) = %q is %d units", s, n, p, Len(p))
		}
		if len(p) < len(s) {
			r, _ := utf8.DecodeRuneInString(s[len(p):])
			if Len(p)+RuneLen(r) <= n {
				t.Fatalf("Prefix(%q, %d) = %q stops early", s, n, p)
			}
		}
		if string(utf16.Decode(units(p))) != string([]rune(p)) {
			t.Fatalf("Prefix(%q, %d) = %q splits a pair", s, n, p)
		}

		// LastIndexByte against a scan of the code units.
		want := -1
		for i := min(n, len(u)-1); i >= 0; i-- {
			if u[i] == '\n' {
				want = i
				break
			}
		}
		if got := LastIndexByte(s, '\n', n); got != want {
			t.Fatalf("LastIndexByte(%q, '\\n', %d) = %d, want %d", s, n, got, want)
		}

		// Trimming agrees with the rune predicate.
		if got, want := Trim(s), strings.TrimFunc(s, IsSpace); got != want {
			t.Fatalf("Trim(%q) = %q, want %q", s, got, want)
		}
		if IsBlank(s) != (Trim(s) == "") {
			t.Fatalf("IsBlank(%q) = %v, Trim = %q", s, IsBlank(s), Trim(s))
		}
		if got := TrimEnd(TrimStart(s)); got != Trim(s) {
			t.Fatalf("TrimEnd(TrimStart(%q)) = %q, Trim = %q", s, got, Trim(s))
		}
	})
}
