package mcpserver

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/message"
)

// TestHistoryPage: read_history's pages: the newest messages, oldest
// first, where the older ones start, and the bounds of a text and of a
// page.
func TestHistoryPage(t *testing.T) {
	t.Parallel()
	msgs := func(n int, text string) []*message.Message {
		var out []*message.Message
		for range n {
			m := message.User(text, 1)
			out = append(out, &m)
		}
		return out
	}
	long := strings.Repeat("é", HistoryTextBytes) // twice the bound in bytes
	cases := []struct {
		name       string
		msgs       []*message.Message
		before     *int
		limit      int
		first, n   int
		next       int // -1: none
		truncated  bool
		pageMaxLen int
	}{
		{"the newest two of three", msgs(3, "x"), nil, 2, 1, 2, 1, false, 0},
		{"the one before them", msgs(3, "x"), new(1), 2, 0, 1, -1, false, 0},
		{"before past the end is the end", msgs(3, "x"), new(99), 5, 0, 3, -1, false, 0},
		{"before 0 is an empty first page", msgs(3, "x"), new(0), 5, 0, 0, -1, false, 0},
		{"no messages", nil, nil, 5, 0, 0, -1, false, 0},
		// Each text is cut to HistoryTextBytes, so HistoryPageBytes
		// holds 16 of them, whatever the limit.
		{"a page's texts are bounded", msgs(40, long), nil, HistoryMax, 24, 16, 24, true, HistoryPageBytes},
	}
	for _, c := range cases {
		page := historyPage("s", c.msgs, c.before, c.limit)
		if len(page.Messages) != c.n || page.Total != len(c.msgs) {
			t.Errorf("%s: %d messages of %d, want %d", c.name, len(page.Messages), page.Total, c.n)
			continue
		}
		if c.n > 0 && page.Messages[0].Index != c.first {
			t.Errorf("%s: first index %d, want %d", c.name, page.Messages[0].Index, c.first)
		}
		switch {
		case c.next < 0 && page.Next != nil:
			t.Errorf("%s: next %d, want none", c.name, *page.Next)
		case c.next >= 0 && (page.Next == nil || *page.Next != c.next):
			t.Errorf("%s: next %v, want %d", c.name, page.Next, c.next)
		}
		size := 0
		for i, m := range page.Messages {
			size += len(m.Text)
			if i > 0 && m.Index != page.Messages[i-1].Index+1 {
				t.Errorf("%s: indexes %d then %d", c.name, page.Messages[i-1].Index, m.Index)
			}
			if m.Truncated != c.truncated || len(m.Text) > HistoryTextBytes || !utf8.ValidString(m.Text) {
				t.Errorf("%s: message %d: %d bytes, truncated %v, valid UTF-8 %v", c.name, m.Index, len(m.Text), m.Truncated, utf8.ValidString(m.Text))
			}
		}
		if c.pageMaxLen > 0 && size > c.pageMaxLen {
			t.Errorf("%s: %d bytes of text, over %d", c.name, size, c.pageMaxLen)
		}
	}
}

// TestEntryOf: a message's text blocks, tool calls and images, and an
// error message without text.
func TestEntryOf(t *testing.T) {
	t.Parallel()
	m := &message.Message{Role: message.RoleAssistant, Content: message.Content{Blocks: []message.Block{
		message.Text("let me look"), {Type: message.BlockToolCall, ID: "c1", Name: "read"}, message.Image("image/png", "AA=="),
	}}, Timestamp: 1700000000000}
	e := entryOf(4, m)
	if e.Index != 4 || e.Role != "assistant" || e.Text != "let me look" || len(e.ToolCalls) != 1 || e.ToolCalls[0] != (ToolCall{ID: "c1", Name: "read"}) ||
		e.Images != 1 || e.Timestamp.UnixMilli() != 1700000000000 {
		t.Fatalf("%+v", e)
	}
	failed := entryOf(0, &message.Message{Role: message.RoleAssistant, ErrorMessage: "overloaded"})
	if failed.Text != "overloaded" || !failed.IsError {
		t.Fatalf("%+v", failed)
	}
}
