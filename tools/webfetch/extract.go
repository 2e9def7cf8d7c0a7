package webfetch

import (
	"bytes"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Page is the readable text of an HTML document.
type Page struct {
	Title string
	Text  string
}

// Nesting bounds of the extraction: deeper lists are not indented
// further, deeper links are rendered as text.
const (
	maxListDepth = 16
	maxLinkDepth = 8
	maxTitle     = 512
)

// skipped are the elements whose whole content is dropped: code, styling,
// embedded objects, form controls and the page's navigation chrome.
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Svg: true, atom.Math: true, atom.Iframe: true, atom.Object: true, atom.Embed: true,
	atom.Canvas: true, atom.Nav: true, atom.Footer: true, atom.Aside: true,
	atom.Select: true, atom.Button: true, atom.Textarea: true, atom.Dialog: true,
}

// blocks are the elements that start and end on a line of their own, with
// the number of line breaks around them (2: a paragraph).
var blocks = map[atom.Atom]int{
	atom.P: 2, atom.Div: 1, atom.Section: 2, atom.Article: 2, atom.Main: 2, atom.Header: 1,
	atom.Blockquote: 2, atom.Figure: 2, atom.Figcaption: 1, atom.Address: 1, atom.Details: 1,
	atom.Summary: 1, atom.Dl: 2, atom.Dt: 1, atom.Dd: 1, atom.Table: 2, atom.Center: 1,
	atom.Caption: 1, atom.Fieldset: 1, atom.Legend: 1, atom.Form: 1, atom.Body: 1,
}

var headings = map[atom.Atom]int{atom.H1: 1, atom.H2: 2, atom.H3: 3, atom.H4: 4, atom.H5: 5, atom.H6: 6}

// Extract renders the HTML document doc as markdown (headings as
// "#", list items as "-" or "1.", links as [text](url) resolved against
// base, code spans and preformatted blocks fenced) or, with markdown
// unset, as plain text with the same line structure. Scripts, styles,
// navigation, footers, asides, embedded objects and form controls are
// dropped; when the document has a <main> element (else exactly one
// <article>), only its content is kept. It never fails: malformed HTML is
// rendered as a browser's tokenizer reads it.
func Extract(doc []byte, base *url.URL, markdown bool) Page {
	x := extractor{z: html.NewTokenizer(bytes.NewReader(doc)), base: base, md: markdown,
		out: make([]byte, 0, len(doc)/2), mainStart: -1, mainEnd: -1, artStart: -1, artEnd: -1}
	x.run()
	return x.page()
}

type listFrame struct {
	ordered bool
	n       int
}

type linkFrame struct {
	start int    // offset of the link's text in out (after "[" in markdown)
	href  string // "" when the link has none usable
}

type extractor struct {
	z    *html.Tokenizer
	base *url.URL
	md   bool

	out     []byte
	space   bool // whitespace seen since the last text byte
	skip    int  // depth inside a skipped element
	skipTag atom.Atom
	pre     int
	inTitle bool
	title   []byte
	lists   []listFrame
	links   []linkFrame
	cells   int // cells so far in the current table row

	mainStart, mainEnd int // the first <main>'s content; -1 = none
	mainDepth          int
	artStart, artEnd   int // the first <article>'s content
	artDepth, articles int
}

func (x *extractor) run() {
	for {
		switch x.z.Next() {
		case html.ErrorToken:
			return
		case html.TextToken:
			if x.skip > 0 {
				continue
			}
			t := x.z.Text()
			if x.inTitle {
				if len(x.title) < maxTitle {
					x.title = append(x.title, t[:min(len(t), maxTitle-len(x.title))]...)
				}
				continue
			}
			if x.pre > 0 {
				x.out = append(x.out, t...)
				continue
			}
			x.text(t)
		case html.StartTagToken:
			x.start(false)
		case html.SelfClosingTagToken:
			x.start(true)
		case html.EndTagToken:
			x.end()
		}
	}
}

// text appends t with its whitespace runs collapsed to one space.
func (x *extractor) text(t []byte) {
	for _, c := range t {
		switch c {
		case ' ', '\t', '\n', '\r', '\f':
			x.space = true
			continue
		}
		if x.space {
			x.space = false
			if n := len(x.out); n > 0 && x.out[n-1] != '\n' && x.out[n-1] != ' ' && !x.openBracket() {
				x.out = append(x.out, ' ')
			}
		}
		x.out = append(x.out, c)
	}
}

// openBracket reports whether out ends with the "[" of an open link, where
// no space belongs.
func (x *extractor) openBracket() bool {
	return x.md && len(x.links) > 0 && x.links[len(x.links)-1].start == len(x.out)
}

// inline writes s at the current position, keeping a pending space.
func (x *extractor) inline(s string) {
	if x.space {
		x.space = false
		if n := len(x.out); n > 0 && x.out[n-1] != '\n' && x.out[n-1] != ' ' {
			x.out = append(x.out, ' ')
		}
	}
	x.out = append(x.out, s...)
}

// block ends the current line and leaves n line breaks (at most 2) before
// what follows; nothing at the start of the text.
func (x *extractor) block(n int) {
	x.space = false
	for len(x.out) > 0 && x.out[len(x.out)-1] == ' ' {
		x.out = x.out[:len(x.out)-1]
	}
	if len(x.out) == 0 {
		return
	}
	have := 0
	for i := len(x.out) - 1; i >= 0 && x.out[i] == '\n' && have < 2; i-- {
		have++
	}
	for ; have < n; have++ {
		x.out = append(x.out, '\n')
	}
}

func (x *extractor) start(selfClosing bool) {
	name, hasAttr := x.z.TagName()
	a := atom.Lookup(name)
	if x.skip > 0 {
		if a == x.skipTag && !selfClosing {
			x.skip++
		}
		return
	}
	if skipped[a] {
		if !selfClosing {
			x.skip, x.skipTag = 1, a
		}
		return
	}
	if n, ok := headings[a]; ok {
		x.block(2)
		if x.md {
			x.out = append(x.out, "######"[:n]...)
			x.out = append(x.out, ' ')
		}
		return
	}
	if n, ok := blocks[a]; ok {
		x.startBlock(a, n)
		return
	}
	switch a {
	case atom.Title:
		x.inTitle = !selfClosing
	case atom.Br:
		for len(x.out) > 0 && x.out[len(x.out)-1] == ' ' {
			x.out = x.out[:len(x.out)-1]
		}
		x.space = false
		x.out = append(x.out, '\n')
	case atom.Hr:
		x.block(2)
		if x.md {
			x.out = append(x.out, "---"...)
		}
		x.block(2)
	case atom.Ul, atom.Ol, atom.Menu:
		x.block(1)
		x.lists = append(x.lists, listFrame{ordered: a == atom.Ol})
	case atom.Li:
		x.startItem()
	case atom.Pre:
		x.block(2)
		if x.md {
			x.out = append(x.out, "```\n"...)
		}
		if !selfClosing {
			x.pre++
		}
	case atom.Code, atom.Kbd, atom.Samp, atom.Tt:
		if x.pre == 0 && x.md && !selfClosing {
			x.inline("`")
		}
	case atom.A:
		x.startLink(selfClosing, hasAttr)
	case atom.Tr:
		x.block(1)
		x.cells = 0
	case atom.Td, atom.Th:
		if x.cells > 0 {
			x.space = false
			x.out = append(x.out, " | "...)
		}
		x.cells++
	}
}

func (x *extractor) end() {
	name, _ := x.z.TagName()
	a := atom.Lookup(name)
	if x.skip > 0 {
		if a == x.skipTag {
			x.skip--
		}
		return
	}
	if _, ok := headings[a]; ok {
		x.block(2)
		return
	}
	if n, ok := blocks[a]; ok {
		x.endBlock(a, n)
		return
	}
	switch a {
	case atom.Title:
		x.inTitle = false
	case atom.Ul, atom.Ol, atom.Menu:
		if len(x.lists) > 0 {
			x.lists = x.lists[:len(x.lists)-1]
		}
		x.block(1)
	case atom.Li, atom.Tr:
		x.block(1)
	case atom.Pre:
		if x.pre > 0 {
			x.pre--
			if x.md {
				if len(x.out) > 0 && x.out[len(x.out)-1] != '\n' {
					x.out = append(x.out, '\n')
				}
				x.out = append(x.out, "```"...)
			}
			x.block(2)
		}
	case atom.Code, atom.Kbd, atom.Samp, atom.Tt:
		if x.pre == 0 && x.md {
			x.out = append(x.out, '`')
		}
	case atom.A:
		x.endLink()
	}
}

// startBlock opens a block element; main and article mark where the
// page's main text starts, a blockquote is quoted in markdown.
func (x *extractor) startBlock(a atom.Atom, n int) {
	x.block(n)
	switch a {
	case atom.Main:
		if x.mainStart < 0 {
			x.mainStart, x.mainDepth = len(x.out), 1
		} else if x.mainDepth > 0 {
			x.mainDepth++
		}
	case atom.Article:
		x.articles++
		if x.artStart < 0 {
			x.artStart, x.artDepth = len(x.out), 1
		} else if x.artDepth > 0 {
			x.artDepth++
		}
	case atom.Blockquote:
		if x.md {
			x.out = append(x.out, "> "...)
		}
	}
}

// startItem starts a list item: indented by its list's depth, numbered in
// an ordered list.
func (x *extractor) startItem() {
	x.block(1)
	depth := len(x.lists)
	for i := 1; i < min(depth, maxListDepth); i++ {
		x.out = append(x.out, "  "...)
	}
	if depth > 0 && x.lists[depth-1].ordered {
		f := &x.lists[depth-1]
		f.n++
		x.out = appendInt(x.out, f.n)
		x.out = append(x.out, ". "...)
	} else {
		x.out = append(x.out, "- "...)
	}
}

// startLink opens a link (up to maxLinkDepth nested): "[" in markdown.
func (x *extractor) startLink(selfClosing, hasAttr bool) {
	if selfClosing || len(x.links) >= maxLinkDepth {
		return
	}
	var href string
	if hasAttr {
		href = x.href()
	}
	if x.md {
		x.inline("[")
	} else if x.space {
		x.inline("")
	}
	x.links = append(x.links, linkFrame{start: len(x.out), href: href})
}

// endBlock closes a block element; the outermost main or article marks
// where the page's main text ends.
func (x *extractor) endBlock(a atom.Atom, n int) {
	switch a {
	case atom.Main:
		if x.mainDepth > 0 {
			if x.mainDepth--; x.mainDepth == 0 {
				x.block(n)
				x.mainEnd = len(x.out)
			}
		}
	case atom.Article:
		if x.artDepth > 0 {
			if x.artDepth--; x.artDepth == 0 {
				x.block(n)
				x.artEnd = len(x.out)
			}
		}
	}
	x.block(n)
}

// endLink closes a link: in markdown "](href)", or nothing around an
// empty link or one without an href.
func (x *extractor) endLink() {
	if len(x.links) == 0 {
		return
	}
	l := x.links[len(x.links)-1]
	x.links = x.links[:len(x.links)-1]
	if !x.md {
		return
	}
	text := bytes.TrimSpace(x.out[l.start:])
	switch {
	case len(text) == 0:
		x.out = x.out[:l.start-1] // drop the "[" of an empty link
	case l.href == "":
		copy(x.out[l.start-1:], x.out[l.start:])
		x.out = x.out[:len(x.out)-1]
	default:
		for len(x.out) > 0 && x.out[len(x.out)-1] == ' ' {
			x.out = x.out[:len(x.out)-1]
		}
		x.out = append(x.out, "]("...)
		x.out = append(x.out, l.href...)
		x.out = append(x.out, ')')
	}
}

// href returns the current tag's href resolved against the base URL, or
// "" for none, a non-web link (javascript:, data:) or a page-local one.
func (x *extractor) href() string {
	for {
		k, v, more := x.z.TagAttr()
		if string(k) == "href" {
			s := strings.TrimSpace(string(v))
			if s == "" || strings.HasPrefix(s, "#") || len(s) > 2048 {
				return ""
			}
			u, err := url.Parse(s)
			if err != nil {
				return ""
			}
			if x.base != nil {
				u = x.base.ResolveReference(u)
			}
			switch u.Scheme {
			case "http", "https", "mailto":
				h := u.String()
				if strings.ContainsAny(h, " ()") {
					h = hrefEscaper.Replace(h)
				}
				return h
			}
			return ""
		}
		if !more {
			return ""
		}
	}
}

// hrefEscaper escapes what would end or split a markdown link target.
var hrefEscaper = strings.NewReplacer(" ", "%20", "(", "%28", ")", "%29")

// page returns the extracted text: the main element's, else the single
// article's, else everything's.
func (x *extractor) page() Page {
	out := x.out
	switch {
	case x.mainStart >= 0:
		end := x.mainEnd
		if end < 0 {
			end = len(out)
		}
		if len(bytes.TrimSpace(out[x.mainStart:end])) > 0 {
			out = out[x.mainStart:end]
		}
	case x.articles == 1 && x.artStart >= 0:
		end := x.artEnd
		if end < 0 {
			end = len(out)
		}
		if len(bytes.TrimSpace(out[x.artStart:end])) > 0 {
			out = out[x.artStart:end]
		}
	}
	title := strings.Join(strings.Fields(string(x.title)), " ")
	return Page{Title: strings.ToValidUTF8(title, "\uFFFD"), Text: validText(bytes.TrimSpace(out))}
}

// validText returns b as a string with invalid UTF-8 replaced.
func validText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}
