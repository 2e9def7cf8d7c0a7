// Package ecmatext implements the JavaScript string semantics the reference
// runtime's numbers depend on: lengths, indexes and cuts counted in UTF-16
// code units (what String.prototype.length counts), and JavaScript's idea of
// white space (what \s matches and String.prototype.trim removes).
//
// Strings are Go strings (UTF-8). A byte that is not valid UTF-8 decodes to
// U+FFFD and counts as one code unit, as it would once the text had been
// decoded into a JavaScript string. Cuts never split a rune, so a surrogate
// pair is never split either.
package ecmatext

import (
	"strings"
	"unicode/utf8"
)

// IsSpace reports whether r is JavaScript white space: a WhiteSpace or
// LineTerminator code point, which is what \s matches in a regular
// expression and what String.prototype.trim removes. It differs from
// unicode.IsSpace: U+FEFF is space here, U+0085 (NEL) is not.
func IsSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x00A0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// Trim is String.prototype.trim: s without leading and trailing JavaScript
// white space. It returns s itself when there is nothing to trim.
func Trim(s string) string {
	// Fast path: ASCII, non-space at both ends (all JavaScript white space
	// is either ASCII ≤ ' ' or non-ASCII).
	if s == "" || (s[0] > ' ' && s[0] < utf8.RuneSelf && s[len(s)-1] > ' ' && s[len(s)-1] < utf8.RuneSelf) {
		return s
	}
	return strings.TrimFunc(s, IsSpace)
}

// TrimStart is String.prototype.trimStart: s without leading JavaScript
// white space.
func TrimStart(s string) string { return strings.TrimLeftFunc(s, IsSpace) }

// TrimEnd is String.prototype.trimEnd: s without trailing JavaScript white
// space.
func TrimEnd(s string) string { return strings.TrimRightFunc(s, IsSpace) }

// IsBlank reports whether Trim(s) == "" (s is empty or only JavaScript white
// space), without allocating.
func IsBlank(s string) bool {
	for _, r := range s {
		if !IsSpace(r) {
			return false
		}
	}
	return true
}

// RuneLen returns the number of UTF-16 code units r takes in a JavaScript
// string: 2 for a supplementary code point (≥ U+10000, a surrogate pair), 1
// otherwise. Unlike unicode/utf16.RuneLen it never returns -1: it is meant
// for runes decoded from Go strings, where invalid bytes become U+FFFD.
func RuneLen(r rune) int {
	if r >= 0x10000 {
		return 2
	}
	return 1
}

// Len returns the length of s in UTF-16 code units: JavaScript's s.length.
func Len(s string) int {
	n, _ := LenASCII(s)
	return n
}

// LenASCII returns Len(s) and whether s is all ASCII (so that byte offsets
// and UTF-16 offsets coincide), in one pass.
func LenASCII(s string) (n int, ascii bool) {
	ascii = true
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			n++
			i++
			continue
		}
		ascii = false
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n += RuneLen(r)
	}
	return n, ascii
}

// ByteOffset returns the byte offset in s of UTF-16 index u, clamped to
// [0, len(s)]. An index inside a surrogate pair is moved back to the pair's
// start, so s[:ByteOffset(s, u)] never splits a rune.
func ByteOffset(s string, u int) int {
	if u <= 0 {
		return 0
	}
	n := 0
	for i := 0; i < len(s); {
		w, size := 1, 1
		if s[i] >= utf8.RuneSelf {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			w = RuneLen(r)
		}
		if n+w > u {
			return i
		}
		n += w
		i += size
	}
	return len(s)
}

// Prefix returns the longest prefix of s at most n UTF-16 code units long
// that does not split a surrogate pair (the reference's truncateUtf16Safe;
// unlike s.slice(0, n), which may keep half a pair). It returns s itself
// when s fits, and "" when n ≤ 0.
func Prefix(s string, n int) string { return s[:ByteOffset(s, n)] }

// LastIndexByte returns the UTF-16 index of the last c in s whose index is
// at most u, or -1: JavaScript's s.lastIndexOf(c, u) for an ASCII c, except
// that a negative u gives -1 (JavaScript would clamp it to 0 and still find
// a c at index 0). A non-ASCII c is never found.
func LastIndexByte(s string, c byte, u int) int {
	if u < 0 {
		return -1
	}
	best := -1
	n := 0
	for i := 0; i < len(s) && n <= u; {
		b := s[i]
		if b < utf8.RuneSelf {
			if b == c {
				best = n
			}
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		n += RuneLen(r)
		i += size
	}
	return best
}
