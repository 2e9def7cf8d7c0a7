//go:build unix

package webfetch

import (
	"bytes"
	"fmt"
	"net/url"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// page5MB is a 5 MB article-like page: headings, paragraphs with links and
// code, lists, tables, and the scripts, styles and navigation a real page
// carries.
func page5MB() []byte {
	var b bytes.Buffer
	b.WriteString("<!doctype html><html><head><title>Big page</title><style>body{margin:0}</style><script>var x = '<p>not text</p>';</script></head><body><nav><ul><li><a href='/'>Home</a></li></ul></nav><main>")
	for i := 0; b.Len() < 5<<20; i++ {
		fmt.Fprintf(&b, "<h2>Section %d</h2><p>Lorem ipsum dolor sit amet, <a href=\"/page/%d\">consectetur</a> adipiscing elit, sed do <code>eiusmod()</code> tempor incididunt ut labore et dolore magna aliqua.\n  Ut enim ad minim veniam, quis nostrud exercitation &amp; ullamco.</p>", i, i)
		fmt.Fprintf(&b, "<ul><li>item one</li><li>item <b>two</b></li></ul><table><tr><td>a</td><td>%d</td></tr></table><script>track(%d)</script><pre>code line\n  indented</pre>", i, i)
	}
	b.WriteString("</main><footer>(c)</footer></body></html>")
	return b.Bytes()
}

// BenchmarkExtract5MB: the extraction of a 5 MB page (target: at most
// 200 ms of CPU per page).
func BenchmarkExtract5MB(b *testing.B) {
	page := page5MB()
	base, _ := url.Parse("https://example.com/docs/")
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		p := Extract(page, base, true)
		if len(p.Text) < 1<<20 {
			b.Fatalf("only %d bytes of text", len(p.Text))
		}
	}
	// CPU time, not wall time: on a shared machine the two differ.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// BenchmarkParseTree5MB is the baseline: x/net/html building the whole
// node tree of the same page, which the extraction avoids by walking the
// tokens.
func BenchmarkParseTree5MB(b *testing.B) {
	page := page5MB()
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := html.Parse(bytes.NewReader(page)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}
