package guard

import (
	"unicode/utf8"
)

// units returns the length of s in UTF-16 code units.
func units(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r > 0xFFFF {
			n += 2
		} else {
			n++
		}
		i += size
	}
	return n
}

// byteOffset returns the byte offset in s of UTF-16 unit index u (clamped to
// len(s)). An index inside a surrogate pair is moved back to the pair's start
// so that a cut never splits a rune.
func byteOffset(s string, u int) int {
	if u <= 0 {
		return 0
	}
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		w, size := 1, 1
		if c >= utf8.RuneSelf {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			if r > 0xFFFF {
				w = 2
			}
		}
		if n+w > u {
			return i
		}
		n += w
		i += size
	}
	return len(s)
}

// prefix returns the first u UTF-16 units of s (never splitting a rune) and
// the number of units actually kept.
func prefix(s string, u int) (string, int) {
	b := byteOffset(s, u)
	p := s[:b]
	return p, units(p)
}

// lastNewlineAtOrBefore returns the UTF-16 index of the last '\n' in s whose
// index is ≤ u, or -1 (JavaScript's s.lastIndexOf("\n", u)).
func lastNewlineAtOrBefore(s string, u int) int {
	if u < 0 {
		return -1
	}
	best := -1
	n := 0
	for i := 0; i < len(s) && n <= u; {
		c := s[i]
		if c < utf8.RuneSelf {
			if c == '\n' {
				best = n
			}
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r > 0xFFFF {
			n += 2
		} else {
			n++
		}
		i += size
	}
	return best
}
