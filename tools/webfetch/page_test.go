package webfetch

import "testing"

// TestPageText pins what web_fetch answers: the header lines (a title only
// when the page has one), the text, and one note naming each cut.
func TestPageText(t *testing.T) {
	t.Parallel()
	base := page{url: "https://example.com/a", ctype: "text/html", text: "hello", maxBytes: 2 << 20, limit: 100, chars: 5}
	for _, tc := range []struct {
		name string
		edit func(p *page)
		want string
	}{
		{"plain", func(p *page) {}, "URL: https://example.com/a\nContent-Type: text/html\n\nhello"},
		{"title", func(p *page) { p.title = "A" }, "URL: https://example.com/a\nContent-Type: text/html\nTitle: A\n\nhello"},
		{"text cut", func(p *page) { p.cut, p.chars = true, 250 },
			"URL: https://example.com/a\nContent-Type: text/html\n\nhello\n\n[the text was cut at 100 of 250 characters]"},
		{"response cut", func(p *page) { p.truncated = true },
			"URL: https://example.com/a\nContent-Type: text/html\n\nhello\n\n[the response was cut at " + sizeText(2<<20) + "]"},
		{"both cut", func(p *page) { p.truncated, p.cut, p.chars = true, true, 250 },
			"URL: https://example.com/a\nContent-Type: text/html\n\nhello\n\n[the response was cut at " + sizeText(2<<20) + "; the text was cut at 100 of 250 characters]"},
	} {
		p := base
		tc.edit(&p)
		if got := p.String(); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
