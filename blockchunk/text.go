package blockchunk

import (
	"strings"
	"unicode/utf8"
)

// isJSSpace reports whether r is whitespace for a JavaScript regular
// expression (\s), which is what the reference tests break characters with.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x00a0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// jsTrim trims JavaScript whitespace from both ends (String.prototype.trim).
func jsTrim(s string) string { return strings.TrimFunc(s, isJSSpace) }

// isBlank reports whether s is empty after jsTrim, without allocating.
func isBlank(s string) bool {
	for _, r := range s {
		if !isJSSpace(r) {
			return false
		}
	}
	return true
}

// u16count returns the length of s in UTF-16 code units and whether s is
// all ASCII.
func u16count(s string) (int, bool) {
	ascii := true
	n := 0
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			n++
			i++
			continue
		}
		ascii = false
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n, ascii
}

// u16len returns the length of s in UTF-16 code units.
func u16len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// isASCII reports whether s has only ASCII bytes.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// offsets converts between byte offsets of a string and UTF-16 offsets. For
// ASCII text both are the same and no table is built.
type offsets struct {
	ascii bool
	u16   []int32 // u16[b] = UTF-16 offset of byte offset b (valid at rune starts and len)
}

func newOffsets(s string, scratch []int32) offsets {
	if isASCII(s) {
		return offsets{ascii: true}
	}
	t := scratch[:0]
	if cap(t) < len(s)+1 {
		t = make([]int32, len(s)+1)
	}
	t = t[:len(s)+1]
	n := int32(0)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		for k := 0; k < size; k++ {
			t[i+k] = n
		}
		i += size
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	t[len(s)] = n
	return offsets{u16: t}
}

// at returns the UTF-16 offset of byte offset b.
func (o offsets) at(b int) int {
	if o.ascii {
		return b
	}
	return int(o.u16[b])
}

// byteFloor returns the largest rune-start byte offset of s whose UTF-16
// offset is at most u. A surrogate pair is never split.
func (o offsets) byteFloor(s string, u int) int {
	if o.ascii {
		return min(u, len(s))
	}
	// Binary search over byte offsets; then step back to a rune start.
	lo, hi := 0, len(s)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if int(o.u16[mid]) <= u {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	// Continuation bytes share their rune's offset: step back to the start.
	for lo > 0 && lo < len(s) && !utf8.RuneStart(s[lo]) {
		lo--
	}
	return lo
}

// stripLeadingNewlines drops "\n" characters at the start of s.
func stripLeadingNewlines(s string) string {
	i := 0
	for i < len(s) && s[i] == '\n' {
		i++
	}
	return s[i:]
}
