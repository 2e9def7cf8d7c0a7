package blockchunk

import (
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/ecmatext"
)

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
		n += int32(ecmatext.RuneLen(r))
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
