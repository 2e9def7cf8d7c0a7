package replytext

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// isEmoji reports whether r is an emoji or emoji modifier the comparison
// normaliser removes.
func isEmoji(r rune) bool {
	switch {
	case r >= 0x1F000 && r <= 0x1FAFF, // pictographs, emoticons, transport, symbols
		r >= 0x2600 && r <= 0x27BF, // misc symbols, dingbats
		r >= 0x2B00 && r <= 0x2BFF, // arrows, stars
		r >= 0x2190 && r <= 0x21FF, // arrows
		r >= 0x2300 && r <= 0x23FF, // technical (⌚, ⏰)
		r == 0x200D, r == 0xFE0F, r == 0xFE0E, r == 0x20E3,
		r >= 0xE0020 && r <= 0xE007F, // tags
		r == 0x00A9, r == 0x00AE, r == 0x203C, r == 0x2049, r == 0x2122, r == 0x2139, r == 0x3030, r == 0x303D:
		return true
	}
	return false
}

// NormalizeForComparison normalises text for duplicate detection: lower
// case, emoji removed, whitespace collapsed to one space, trimmed.
func NormalizeForComparison(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if isEmoji(r) {
			continue
		}
		if ecmatext.IsSpace(r) || unicode.IsSpace(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteString(strings.ToLower(string(r)))
	}
	return b.String()
}

// DuplicateMinChars is the shortest normalised text the messaging-tool
// duplicate check considers.
const DuplicateMinChars = 10

// IsMessagingDuplicate reports whether normalized (a NormalizeForComparison
// result) duplicates a text already sent through a messaging tool: both at
// least DuplicateMinChars long and one contains the other.
func IsMessagingDuplicate(normalized string, sentNormalized []string) bool {
	if ecmatext.Len(normalized) < DuplicateMinChars {
		return false
	}
	for _, s := range sentNormalized {
		if ecmatext.Len(s) < DuplicateMinChars {
			continue
		}
		if strings.Contains(normalized, s) || strings.Contains(s, normalized) {
			return true
		}
	}
	return false
}

func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }
