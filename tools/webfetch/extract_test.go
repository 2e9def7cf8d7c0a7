package webfetch

import (
	"net/url"
	"strings"
	"testing"
)

// TestExtract: the markdown (and text) rendering of the parts of a page a
// reader needs, without the chrome.
func TestExtract(t *testing.T) {
	t.Parallel()
	base, _ := url.Parse("https://example.com/docs/page.html")
	for _, tc := range []struct {
		name, html string
		md, text   string
	}{
		{"headings and paragraphs",
			"<h1>Title</h1><p>First   para\ngraph.</p><h2>Sub</h2><p>Second.</p>",
			"# Title\n\nFirst para graph.\n\n## Sub\n\nSecond.",
			"Title\n\nFirst para graph.\n\nSub\n\nSecond."},
		{"lists, nested and ordered",
			"<ul><li>one</li><li>two<ol><li>a</li><li>b</li></ol></li></ul>",
			"- one\n- two\n  1. a\n  2. b",
			"- one\n- two\n  1. a\n  2. b"},
		{"links resolved, empty and script links dropped",
			`<p>See <a href="../api.html">the API</a>, <a href="javascript:x()">this</a>, <a href="#top">top</a> and <a href="/x"> </a>.</p>`,
			"See [the API](https://example.com/api.html), this, top and .",
			"See the API, this, top and ."},
		{"code",
			"<p>Run <code>go test</code>:</p><pre><code>go test ./...\n  -race\n</code></pre>",
			"Run `go test`:\n\n```\ngo test ./...\n  -race\n```",
			"Run go test:\n\ngo test ./...\n  -race"},
		{"scripts, styles, nav, footer, forms' controls dropped",
			"<nav><a href=/>Home</a></nav><script>alert(1)</script><style>p{}</style><p>Body<button>Click</button></p><footer>(c) 2026</footer>",
			"Body", "Body"},
		{"main wins over the chrome around it",
			"<header>Site</header><main><h1>Article</h1><p>Text.</p></main><div>Related junk</div>",
			"# Article\n\nText.", "Article\n\nText."},
		{"a single article wins",
			"<div>menu</div><article><p>Story.</p></article><div>more</div>",
			"Story.", "Story."},
		{"entities and line breaks",
			"<p>a &amp; b<br>c&nbsp;d</p>",
			"a & b\nc\u00a0d", "a & b\nc\u00a0d"},
		{"table",
			"<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>",
			"k | v\na | 1", "k | v\na | 1"},
		{"unclosed and nested skip elements",
			"<p>keep</p><svg><svg></svg><text>drop</text></svg><p>also</p><script>never closed",
			"keep\n\nalso", "keep\n\nalso"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Extract([]byte(tc.html), base, true).Text; got != tc.md {
				t.Errorf("markdown:\n%q\nwant\n%q", got, tc.md)
			}
			if got := Extract([]byte(tc.html), base, false).Text; got != tc.text {
				t.Errorf("text:\n%q\nwant\n%q", got, tc.text)
			}
		})
	}
}

// TestExtractTitle: the title is kept apart, whitespace collapsed.
func TestExtractTitle(t *testing.T) {
	t.Parallel()
	p := Extract([]byte("<html><head><title> My\n Page </title></head><body><p>x</p></body></html>"), nil, true)
	if p.Title != "My Page" || p.Text != "x" {
		t.Fatalf("%+v", p)
	}
}

// FuzzExtract: any bytes render without panicking, as valid UTF-8.
func FuzzExtract(f *testing.F) {
	for _, s := range []string{"<p>x</p>", "<a href='x'><a href='y'>z</a>", "<ol><li><ul><li>", "<pre><code>", "</a></a></li>", "\xff<p>\xfe"} {
		f.Add(s)
	}
	base, _ := url.Parse("https://example.com/")
	f.Fuzz(func(t *testing.T, s string) {
		for _, md := range []bool{true, false} {
			p := Extract([]byte(s), base, md)
			if !utf8Valid(p.Text) || !utf8Valid(p.Title) {
				t.Fatalf("invalid UTF-8 from %q", s)
			}
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }
