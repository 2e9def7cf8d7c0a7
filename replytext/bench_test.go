package replytext

import (
	"fmt"
	"strings"
	"testing"
)

func sampleReply(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "Paragraph %d explains `code` and <b>tags</b> a little. ", i)
		if i%5 == 4 {
			b.WriteString("\n\n```go\nx := a < b\n```\n\n")
		}
	}
	return b.String()
}

// BenchmarkStream feeds a 4 KB reply in 20-byte deltas, as a provider
// streams it, through Stream (visible-text updates).
func BenchmarkStream(b *testing.B) {
	text := sampleReply(4096)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		var s Stream
		for i := 0; i < len(text); i += 20 {
			s.Add(EventTextDelta, text[i:min(i+20, len(text))], "")
		}
	}
}

// BenchmarkStripTags strips a 64 KB text with reasoning blocks.
func BenchmarkStripTags(b *testing.B) {
	text := strings.Repeat("<think>plan the answer</think>"+sampleReply(900), 64)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		StripTags(text, false)
	}
}
