// Package webfetch is the web_fetch tool: an HTTP(S) GET of a URL the
// model gives, returning the page's readable text (HTML rendered as
// markdown, text and JSON as they are), behind the SSRF guard of package
// netguard.
//
// Every connection is checked where it is made: the dialer resolves the
// host itself, refuses the addresses the guard refuses (loopback, private,
// link-local and metadata, … unless the operator allows them) and dials
// only the checked addresses, so neither a redirect nor a DNS answer that
// changes between check and use (rebinding) reaches a refused address.
// Proxies from the environment are never used. Responses are bounded in
// size (read through a LimitReader, never allocated beyond the cap), time
// and redirects.
//
// Files: webfetch.go holds the tool and its HTTP client, extract.go the
// HTML-to-markdown extraction.
package webfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/tools/internal/toolargs"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/netguard"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
)

// Name is the tool's name.
const Name = "web_fetch"

// Defaults of Config, used for every field left zero.
const (
	MaxResponseBytesDefault = 2 << 20
	TimeoutDefault          = 30 * time.Second
	MaxRedirectsDefault     = 3
	MaxCharsDefault         = 50_000
	UserAgentDefault        = "Mozilla/5.0 (compatible; Lanefleet-web_fetch/1.0)"
)

// Bounds of the model's arguments.
const (
	maxURLBytes = 8 << 10
	minChars    = 100
)

// Config configures the web_fetch tool.
type Config struct {
	// Policy is the operator's exceptions to the SSRF guard; the zero
	// Policy reaches global unicast addresses only.
	Policy netguard.Policy
	// MaxResponseBytes caps the bytes read of a response body (after
	// decompression); a longer body is cut there, with a notice.
	MaxResponseBytes int64
	// Timeout bounds one call: connecting, redirects and reading.
	Timeout time.Duration
	// MaxRedirects bounds the redirects one call follows; -1: none.
	MaxRedirects int
	// MaxChars caps the characters of text returned (the model may ask
	// for fewer).
	MaxChars int
	// UserAgent is sent with every request.
	UserAgent string
	// LookupNetIP resolves a host name to the addresses dialled; default
	// net.DefaultResolver.LookupNetIP. (Tests point names at local
	// servers with it.)
	LookupNetIP func(ctx context.Context, network, host string) ([]netip.Addr, error)
}

func (c Config) withDefaults() Config {
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = MaxResponseBytesDefault
	}
	if c.Timeout == 0 {
		c.Timeout = TimeoutDefault
	}
	if c.MaxRedirects == 0 {
		c.MaxRedirects = MaxRedirectsDefault
	}
	if c.MaxChars == 0 {
		c.MaxChars = MaxCharsDefault
	}
	if c.UserAgent == "" {
		c.UserAgent = UserAgentDefault
	}
	if c.LookupNetIP == nil {
		c.LookupNetIP = net.DefaultResolver.LookupNetIP
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.MaxResponseBytes < 0:
		return errors.New("webfetch: MaxResponseBytes is negative")
	case c.Timeout < 0:
		return errors.New("webfetch: Timeout is negative")
	case c.MaxRedirects < -1:
		return errors.New("webfetch: MaxRedirects is below -1")
	case c.MaxChars < 0:
		return errors.New("webfetch: MaxChars is negative")
	}
	return nil
}

// Tool is the web_fetch tool; it is safe for concurrent use.
type Tool struct {
	cfg    Config
	client *http.Client
}

// New returns the web_fetch tool, or an error for a negative limit.
//
// The tool's arguments are {url, extractMode?, maxChars?}: url an http or
// https URL; extractMode "markdown" (default) or "text"; maxChars at most
// Config.MaxChars. Its result is the page's text after a line naming the
// final URL, its content type and title; details carry url, finalUrl,
// status, contentType, title, bytes, truncated and chars. A refused
// address, a failed request, an HTTP error status and a content type other
// than HTML, text or JSON are errors the model sees.
func New(cfg Config) (*Tool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Tool{cfg: cfg}
	tr := &http.Transport{
		Proxy:                  nil, // never the environment's proxy
		DialContext:            t.dial,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  cfg.Timeout,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConns:           16,
		IdleConnTimeout:        30 * time.Second,
	}
	t.client = &http.Client{Transport: tr, CheckRedirect: t.checkRedirect}
	return t, nil
}

// Spec implements tools.Tool.
func (t *Tool) Spec() provider.Tool {
	return provider.Tool{
		Name: Name,
		Description: fmt.Sprintf("Fetch a web page or file over HTTP(S) (GET) and return its readable content: HTML as markdown (or plain text), text and JSON as they are. "+
			"No JavaScript runs. Output is limited to %d characters; responses beyond %s are cut. Private, local and cloud metadata addresses cannot be fetched.",
			t.cfg.MaxChars, sizeText(t.cfg.MaxResponseBytes)),
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"url":         map[string]any{"type": "string", "description": "The http or https URL to fetch"},
				"extractMode": map[string]any{"type": "string", "enum": []any{"markdown", "text"}, "description": "How to render HTML: markdown (default) or text"},
				"maxChars":    map[string]any{"type": "number", "description": fmt.Sprintf("Return at most this many characters (%d to %d)", minChars, t.cfg.MaxChars)},
			},
			"required": []any{"url"},
		},
	}
}

// Idempotent implements tools.Idempotent: a GET may be repeated.
func (t *Tool) Idempotent() bool { return true }

// Call implements tools.Tool.
func (t *Tool) Call(ctx context.Context, call tools.Call) (tools.Result, error) {
	u, markdown, limit, err := t.args(call.Args)
	if err != nil {
		return tools.Result{}, err
	}

	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return tools.Result{}, fmt.Errorf("cannot request %s: %v", u.Redacted(), err)
	}
	req.Header.Set("User-Agent", t.cfg.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,text/*;q=0.8")
	req.Header.Set("Accept-Language", "en-US,en;q=0.9")
	resp, err := t.client.Do(req)
	if err != nil {
		return tools.Result{}, requestError(u, err, t.cfg.Timeout)
	}
	defer resp.Body.Close()
	final := resp.Request.URL

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return tools.Result{}, fmt.Errorf("%s answered HTTP %s", final.Redacted(), resp.Status)
	}
	body, truncated, err := readBounded(resp.Body, t.cfg.MaxResponseBytes)
	if err != nil {
		return tools.Result{}, fmt.Errorf("reading %s failed after %s: %v", final.Redacted(), sizeText(int64(len(body))), err)
	}
	kind, ctype, err := classify(resp.Header.Get("Content-Type"), body)
	if err != nil {
		return tools.Result{}, fmt.Errorf("%s: %w", final.Redacted(), err)
	}

	var title, text string
	switch kind {
	case kindHTML:
		p := Extract(body, final, markdown)
		title, text = p.Title, p.Text
	default:
		text = validText(body)
	}
	chars := utf8.RuneCountInString(text)
	cut := false
	if chars > limit {
		text, cut = cutRunes(text, limit), true
	}

	return tools.Result{
		Content: []message.Block{message.Text(page{url: final.Redacted(), ctype: ctype, title: title, text: text,
			truncated: truncated, maxBytes: t.cfg.MaxResponseBytes, cut: cut, limit: limit, chars: chars}.String())},
		Details: map[string]any{
			"url": u.Redacted(), "finalUrl": final.Redacted(), "status": int64(resp.StatusCode),
			"contentType": ctype, "title": title, "bytes": int64(len(body)),
			"truncated": truncated || cut, "chars": int64(min(chars, limit)),
		},
	}, nil
}

// args reads and checks a call's arguments: the URL, whether the page
// comes as markdown (the default) or text, and the most characters of it.
func (t *Tool) args(args map[string]any) (u *url.URL, markdown bool, limit int, err error) {
	raw, _, err := toolargs.String(args, "url", true)
	if err != nil {
		return nil, false, 0, err
	}
	mode, _, err := toolargs.String(args, "extractMode", false)
	if err != nil {
		return nil, false, 0, err
	}
	markdown = true
	switch strings.ToLower(strings.TrimSpace(mode)) {
	case "", "markdown":
	case "text":
		markdown = false
	default:
		return nil, false, 0, fmt.Errorf("extractMode must be \"markdown\" or \"text\", not %q", mode)
	}
	if limit, err = t.maxChars(args); err != nil {
		return nil, false, 0, err
	}
	if u, err = t.checkURL(raw); err != nil {
		return nil, false, 0, err
	}
	return u, markdown, limit, nil
}

// page is what web_fetch answers: a header of the page's URL, content type
// and title, its text, and a note when the response or the text was cut.
type page struct {
	url, ctype, title, text string
	truncated               bool  // the response was cut at maxBytes
	maxBytes                int64 // the most bytes of a response read
	cut                     bool  // the text was cut at limit characters
	limit, chars            int   // the most characters, and those of the whole text
}

func (p page) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "URL: %s\nContent-Type: %s\n", p.url, p.ctype)
	if p.title != "" {
		fmt.Fprintf(&b, "Title: %s\n", p.title)
	}
	b.WriteString("\n")
	b.WriteString(p.text)
	if p.cut || p.truncated {
		b.WriteString("\n\n[")
		if p.truncated {
			fmt.Fprintf(&b, "the response was cut at %s", sizeText(p.maxBytes))
		}
		if p.cut {
			if p.truncated {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "the text was cut at %d of %d characters", p.limit, p.chars)
		}
		b.WriteString("]")
	}
	return b.String()
}

// maxChars reads the optional maxChars argument, clamped to the tool's
// bounds.
func (t *Tool) maxChars(args map[string]any) (int, error) {
	v, ok := args["maxChars"]
	if !ok || v == nil {
		return t.cfg.MaxChars, nil
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(x), 64); err != nil {
			return 0, fmt.Errorf("argument \"maxChars\" must be a number, got the string %q", x)
		}
	default:
		return 0, fmt.Errorf("argument \"maxChars\" must be a number, got %T", v)
	}
	if f != f || f < 0 {
		return 0, errors.New("argument \"maxChars\" must be a positive number")
	}
	return int(max(float64(minChars), min(float64(t.cfg.MaxChars), f))), nil
}

// checkURL parses the model's URL and refuses what may not be fetched:
// other schemes, credentials, hosts the guard refuses before any lookup.
// The result has the host in its canonical form.
func (t *Tool) checkURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("url is empty; give an http or https URL")
	}
	if len(raw) > maxURLBytes {
		return nil, fmt.Errorf("url is %d bytes, over the %d-byte limit", len(raw), maxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("url %q is not a valid URL: %v", raw, errors.Unwrap(err))
	}
	if err := t.checkTarget(u); err != nil {
		return nil, err
	}
	return u, nil
}

// checkTarget checks a URL to be requested (the model's or a redirect's)
// and puts its host in canonical form.
func (t *Tool) checkTarget(u *url.URL) error {
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return fmt.Errorf("url %q has no scheme; give an http:// or https:// URL", u.Redacted())
	default:
		return fmt.Errorf("url %q: only http and https URLs can be fetched, not %s", u.Redacted(), u.Scheme)
	}
	if u.User != nil {
		return fmt.Errorf("url %q carries credentials (user:password@), which web_fetch does not send", u.Redacted())
	}
	host, err := t.cfg.Policy.CheckHost(u.Hostname())
	if err != nil {
		return fmt.Errorf("url %q: %w", u.Redacted(), err)
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" {
		host += ":" + p
	}
	u.Host = host
	return nil
}

// checkRedirect follows at most MaxRedirects redirects, each to a URL
// checkTarget accepts.
func (t *Tool) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > max(t.cfg.MaxRedirects, 0) {
		return fmt.Errorf("stopped after %d redirects (the limit is %d)", len(via)-1, max(t.cfg.MaxRedirects, 0))
	}
	if err := t.checkTarget(req.URL); err != nil {
		return fmt.Errorf("redirect refused: %w", err)
	}
	req.Host = req.URL.Host // the canonical host, as dialled
	return nil
}

// dial connects to addr ("host:port") as the guard allows: a host of
// Policy.AllowHosts on any of its addresses; any other only on the
// addresses the policy accepts, each checked again by the dialer's Control
// on the address it connects to.
func (t *Tool) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", port, err)
	}
	trusted := t.cfg.Policy.AllowsHost(host)
	var ips []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{a}
	} else if ips, err = t.cfg.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, fmt.Errorf("cannot resolve %s: %w", host, err)
	}
	var first error
	for _, ip := range ips {
		ip = ip.Unmap()
		d := net.Dialer{}
		if !trusted {
			if err := t.cfg.Policy.CheckAddr(ip); err != nil {
				var be *netguard.BlockedError
				if errors.As(err, &be) {
					be.Host = host
				}
				first = cmpOr(first, err)
				continue
			}
			d.Control = t.cfg.Policy.Control
		}
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip, uint16(pn)).String())
		if err == nil {
			return c, nil
		}
		first = cmpOr(first, err)
	}
	if first == nil {
		first = fmt.Errorf("%s has no addresses", host)
	}
	return nil, first
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// requestError tells the model why a request failed, the guard's refusal
// first.
func requestError(u *url.URL, err error, timeout time.Duration) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var be *netguard.BlockedError
	switch {
	case errors.As(err, &be):
		return fmt.Errorf("fetching %s refused: %w", u.Redacted(), err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("fetching %s timed out after %s", u.Redacted(), timeout)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("fetching %s aborted: %w", u.Redacted(), err)
	}
	return fmt.Errorf("fetching %s failed: %w", u.Redacted(), err)
}

// readBounded reads r up to limit bytes, reporting whether more followed.
// It allocates at most limit+1 bytes, however long the body.
func readBounded(r io.Reader, limit int64) ([]byte, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if int64(len(b)) > limit {
		return b[:limit], true, nil
	}
	return b, false, err
}

type kind int

const (
	kindHTML kind = iota
	kindText
)

// classify decides how a body is read from its Content-Type (sniffed
// from the body when absent): HTML, text or JSON; anything else is
// refused.
func classify(header string, body []byte) (kind, string, error) {
	ctype := header
	if strings.TrimSpace(ctype) == "" {
		ctype = http.DetectContentType(body)
	}
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(strings.Split(ctype, ";")[0]))
	}
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return kindHTML, mt, nil
	case strings.HasPrefix(mt, "text/"),
		mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/xml", strings.HasSuffix(mt, "+xml"):
		return kindText, mt, nil
	}
	return 0, mt, fmt.Errorf("web_fetch reads HTML, text and JSON; this is %s, which it does not fetch", mt)
}

// cutRunes returns the first n characters of s.
func cutRunes(s string, n int) string {
	i := 0
	for k := range s {
		if i == n {
			return s[:k]
		}
		i++
	}
	return s
}

// sizeText renders a byte count for messages.
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
