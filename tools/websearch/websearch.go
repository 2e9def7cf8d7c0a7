// Package websearch is the web_search tool: a query sent to the search
// provider the operator configured — the Brave Search API or a SearXNG
// instance — whose results come back as title, URL and snippet.
//
// The provider's endpoint is the operator's: it is not subject to
// web_fetch's SSRF guard (a SearXNG instance commonly runs on the same
// host), and the model chooses only the query and a few bounded options.
// Requests never go through a proxy from the environment; responses are
// bounded in size and time.
package websearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/tools/internal/toolargs"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
)

// Name is the tool's name.
const Name = "web_search"

// Providers.
const (
	Brave   = "brave"
	SearXNG = "searxng"
)

// BraveEndpoint is the Brave Search API's web search endpoint.
const BraveEndpoint = "https://api.search.brave.com/res/v1/web/search"

// Defaults of Config, used for every field left zero.
const (
	MaxResultsDefault       = 5
	TimeoutDefault          = 15 * time.Second
	MaxResponseBytesDefault = 1 << 20
)

// Bounds.
const (
	maxResultsCap = 20  // Brave's own maximum count
	maxQueryBytes = 400 // Brave's query limit, in characters
	maxTitle      = 200
	maxSnippet    = 500
	maxURL        = 2048
)

// Config configures the web_search tool.
type Config struct {
	// Provider is Brave or SearXNG.
	Provider string
	// URL is the SearXNG instance's base URL (required for SearXNG), or
	// the Brave endpoint (default BraveEndpoint).
	URL string
	// APIKey is Brave's subscription token (sent as X-Subscription-Token);
	// required for Brave.
	APIKey provider.Secret
	// MaxResults caps the results of one search (at most 20); the model
	// may ask for fewer.
	MaxResults int
	// Timeout bounds one search.
	Timeout time.Duration
	// MaxResponseBytes caps the provider's answer.
	MaxResponseBytes int64
}

// Tool is the web_search tool; it is safe for concurrent use.
type Tool struct {
	cfg      Config
	endpoint *url.URL
	client   *http.Client
}

// New returns the web_search tool for cfg, or an error naming what is
// missing or wrong.
//
// The tool's arguments are {query, count?, country?, language?,
// freshness?}: count 1 to MaxResults; country a two-letter code (Brave);
// language a code such as "en"; freshness day, week, month or year. Its
// result lists the results, numbered, each with its title, URL and
// snippet; details carry provider, query and results.
func New(cfg Config) (*Tool, error) {
	switch cfg.Provider {
	case Brave:
		if cfg.URL == "" {
			cfg.URL = BraveEndpoint
		}
		if cfg.APIKey.Reveal() == "" {
			return nil, errors.New("websearch: brave needs an API key (BRAVE_API_KEY)")
		}
	case SearXNG:
		if cfg.URL == "" {
			return nil, errors.New("websearch: searxng needs the instance's URL")
		}
	default:
		return nil, fmt.Errorf("websearch: provider %q: want %s or %s", cfg.Provider, Brave, SearXNG)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("websearch: URL %q is not an http(s) URL", cfg.URL)
	}
	if cfg.Provider == SearXNG {
		u = u.JoinPath("search")
	}
	switch {
	case cfg.MaxResults < 0 || cfg.Timeout < 0 || cfg.MaxResponseBytes < 0:
		return nil, errors.New("websearch: a negative limit")
	case cfg.MaxResults == 0:
		cfg.MaxResults = MaxResultsDefault
	}
	cfg.MaxResults = min(cfg.MaxResults, maxResultsCap)
	if cfg.Timeout == 0 {
		cfg.Timeout = TimeoutDefault
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = MaxResponseBytesDefault
	}
	tr := &http.Transport{Proxy: nil, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout, MaxResponseHeaderBytes: 64 << 10, MaxIdleConns: 4, IdleConnTimeout: 60 * time.Second}
	return &Tool{cfg: cfg, endpoint: u, client: &http.Client{Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

// Spec implements tools.Tool.
func (t *Tool) Spec() provider.Tool {
	return provider.Tool{
		Name:        Name,
		Description: fmt.Sprintf("Search the web. Returns up to %d results, each with its title, URL and a snippet; fetch a result's page with web_fetch to read it.", t.cfg.MaxResults),
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"query":     map[string]any{"type": "string", "description": "The search query"},
				"count":     map[string]any{"type": "number", "description": fmt.Sprintf("Number of results (1 to %d)", t.cfg.MaxResults)},
				"country":   map[string]any{"type": "string", "description": "Two-letter country code for regional results, e.g. US or DE"},
				"language":  map[string]any{"type": "string", "description": "Language code of the results, e.g. en or de"},
				"freshness": map[string]any{"type": "string", "enum": []any{"day", "week", "month", "year"}, "description": "Only results from the past day, week, month or year"},
			},
			"required": []any{"query"},
		},
	}
}

// Idempotent implements tools.Idempotent: a search may be repeated.
func (t *Tool) Idempotent() bool { return true }

// Result is one search result.
type Result struct {
	Title, URL, Snippet string
}

// query is a validated search.
type query struct {
	q, country, language, freshness string
	count                           int
}

// Call implements tools.Tool.
func (t *Tool) Call(ctx context.Context, call tools.Call) (tools.Result, error) {
	q, err := t.parse(call.Args)
	if err != nil {
		return tools.Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	var results []Result
	if t.cfg.Provider == Brave {
		results, err = t.brave(ctx, q)
	} else {
		results, err = t.searxng(ctx, q)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return tools.Result{}, fmt.Errorf("web_search (%s) timed out after %s", t.cfg.Provider, t.cfg.Timeout)
		}
		return tools.Result{}, fmt.Errorf("web_search (%s): %w", t.cfg.Provider, err)
	}
	if len(results) > q.count {
		results = results[:q.count]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Results for %q (%s):", q.q, t.cfg.Provider)
	if len(results) == 0 {
		b.WriteString("\nNo results.")
	}
	list := make([]any, len(results))
	for i, r := range results {
		fmt.Fprintf(&b, "\n\n%d. %s\n   %s", i+1, r.Title, r.URL)
		if r.Snippet != "" {
			fmt.Fprintf(&b, "\n   %s", r.Snippet)
		}
		list[i] = map[string]any{"title": r.Title, "url": r.URL, "snippet": r.Snippet}
	}
	return tools.Result{
		Content: []message.Block{message.Text(b.String())},
		Details: map[string]any{"provider": t.cfg.Provider, "query": q.q, "results": list},
	}, nil
}

func (t *Tool) parse(args map[string]any) (query, error) {
	q := query{count: t.cfg.MaxResults}
	var err error
	if q.q, _, err = toolargs.String(args, "query", true); err != nil {
		return q, err
	}
	q.q = strings.TrimSpace(q.q)
	switch {
	case q.q == "":
		return q, errors.New("query is empty; give the words to search for")
	case utf8.RuneCountInString(q.q) > maxQueryBytes:
		return q, fmt.Errorf("query is over %d characters; shorten it", maxQueryBytes)
	}
	if v, ok := args["count"]; ok && v != nil {
		n, err := number(v)
		if err != nil {
			return q, fmt.Errorf("argument \"count\" %w", err)
		}
		q.count = max(1, min(t.cfg.MaxResults, int(n)))
	}
	if q.country, _, err = toolargs.String(args, "country", false); err != nil {
		return q, err
	}
	if q.country = strings.ToUpper(strings.TrimSpace(q.country)); q.country != "" && !isLetters(q.country, 2, 2) {
		return q, fmt.Errorf("country must be a two-letter code such as US, not %q", q.country)
	}
	if q.language, _, err = toolargs.String(args, "language", false); err != nil {
		return q, err
	}
	if q.language = strings.ToLower(strings.TrimSpace(q.language)); q.language != "" && !isLetters(strings.ReplaceAll(q.language, "-", ""), 2, 8) {
		return q, fmt.Errorf("language must be a code such as en or pt-br, not %q", q.language)
	}
	if q.freshness, _, err = toolargs.String(args, "freshness", false); err != nil {
		return q, err
	}
	switch q.freshness = strings.ToLower(strings.TrimSpace(q.freshness)); q.freshness {
	case "", "day", "week", "month", "year":
	default:
		return q, fmt.Errorf("freshness must be day, week, month or year, not %q", q.freshness)
	}
	return q, nil
}

// braveFreshness maps freshness to Brave's codes.
var braveFreshness = map[string]string{"day": "pd", "week": "pw", "month": "pm", "year": "py"}

// brave searches through the Brave Search API.
func (t *Tool) brave(ctx context.Context, q query) ([]Result, error) {
	v := url.Values{"q": {q.q}, "count": {strconv.Itoa(q.count)}}
	if q.country != "" {
		v.Set("country", q.country)
	}
	if q.language != "" {
		v.Set("search_lang", q.language)
	}
	if f := braveFreshness[q.freshness]; f != "" {
		v.Set("freshness", f)
	}
	var body struct {
		Web struct {
			Results []struct {
				Title       string `json:"title"`
				URL         string `json:"url"`
				Description string `json:"description"`
			} `json:"results"`
		} `json:"web"`
	}
	hdr := http.Header{"X-Subscription-Token": {t.cfg.APIKey.Reveal()}}
	if err := t.get(ctx, v, hdr, &body); err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(body.Web.Results))
	for _, r := range body.Web.Results {
		out = append(out, result(r.Title, r.URL, r.Description))
	}
	return out, nil
}

// searxng searches through a SearXNG instance's JSON API.
func (t *Tool) searxng(ctx context.Context, q query) ([]Result, error) {
	v := url.Values{"q": {q.q}, "format": {"json"}}
	if q.language != "" {
		v.Set("language", q.language)
	}
	if q.freshness != "" {
		v.Set("time_range", q.freshness)
	}
	var body struct {
		Results []struct {
			Title   string `json:"title"`
			URL     string `json:"url"`
			Content string `json:"content"`
		} `json:"results"`
	}
	if err := t.get(ctx, v, nil, &body); err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(body.Results))
	for _, r := range body.Results {
		out = append(out, result(r.Title, r.URL, r.Content))
	}
	return out, nil
}

// get requests the endpoint with the query v and decodes its JSON answer
// into out, reading at most MaxResponseBytes.
func (t *Tool) get(ctx context.Context, v url.Values, hdr http.Header, out any) error {
	u := *t.endpoint
	u.RawQuery = v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry the query; the model has it
		}
		return fmt.Errorf("request failed: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, t.cfg.MaxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(t.cfg.Provider, resp.StatusCode, data)
	}
	if int64(len(data)) > t.cfg.MaxResponseBytes {
		return fmt.Errorf("the answer is over %d bytes", t.cfg.MaxResponseBytes)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the answer is not the provider's JSON: %v", err)
	}
	return nil
}

// statusError describes a failed search, with the provider's own message
// when its error body has one.
func statusError(prov string, status int, body []byte) error {
	msg := fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
	var e struct {
		Error struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Detail != "" {
		msg += ": " + clip(e.Error.Code+" "+e.Error.Detail, maxSnippet)
	}
	switch {
	case prov == Brave && (status == http.StatusUnauthorized || status == http.StatusForbidden):
		msg += " (the worker's BRAVE_API_KEY was refused)"
	case prov == Brave && status == http.StatusTooManyRequests:
		msg += " (rate limited; try again later)"
	case prov == SearXNG && status == http.StatusForbidden:
		msg += " (the instance does not serve JSON: enable it with search.formats: [html, json] in its settings.yml)"
	}
	return errors.New(msg)
}

// result cleans one result: tags and entities out of the snippet (Brave
// marks the query's words with <strong>), each field bounded.
func result(title, u, snippet string) Result {
	return Result{Title: clip(plain(title), maxTitle), URL: clip(strings.TrimSpace(u), maxURL), Snippet: clip(plain(snippet), maxSnippet)}
}

// plain drops HTML tags, decodes entities and collapses whitespace.
func plain(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>' && in:
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return strings.Join(strings.Fields(html.UnescapeString(b.String())), " ")
}

func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for k := range s {
		if i == n {
			return s[:k] + "…"
		}
		i++
	}
	return s
}

func isLetters(s string, lo, hi int) bool {
	if len(s) < lo || len(s) > hi {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

func number(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		if x != x {
			return 0, errors.New("must be a number")
		}
		return x, nil
	case int:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil || f != f {
			return 0, fmt.Errorf("must be a number, got the string %q", x)
		}
		return f, nil
	}
	return 0, fmt.Errorf("must be a number, got %T", v)
}
