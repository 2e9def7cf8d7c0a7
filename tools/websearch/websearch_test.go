package websearch

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
)

// fake is a search provider on a real local server answering with a
// recorded body, keeping the requests it got.
func fake(t *testing.T, status int, file string) (*httptest.Server, chan *http.Request) {
	t.Helper()
	body, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	reqs := make(chan *http.Request, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs <- r
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, reqs
}

func call(t *testing.T, tool *Tool, args map[string]any) (tools.Result, error) {
	t.Helper()
	return tool.Call(t.Context(), tools.Call{ID: "s1", Name: Name, Args: args})
}

func text(r tools.Result) string { return message.Content{Blocks: r.Content}.Text() }

// TestBrave: the Brave Search API is asked as its documentation says (the
// subscription token header, q, count, country, search_lang, freshness)
// and its answer becomes title, URL and snippet, tags and entities out.
func TestBrave(t *testing.T) {
	t.Parallel()
	srv, reqs := fake(t, http.StatusOK, "brave.json")
	tool, err := New(Config{Provider: Brave, URL: srv.URL + "/res/v1/web/search", APIKey: provider.Secret("BSA-test-key-123")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := call(t, tool, map[string]any{"query": "go sync.Map", "count": 2, "country": "de", "language": "en", "freshness": "week"})
	if err != nil {
		t.Fatal(err)
	}
	r := <-reqs
	if r.URL.Path != "/res/v1/web/search" || r.Header.Get("X-Subscription-Token") != "BSA-test-key-123" || r.Header.Get("Accept") != "application/json" {
		t.Errorf("request %s %v", r.URL, r.Header)
	}
	want := url.Values{"q": {"go sync.Map"}, "count": {"2"}, "country": {"DE"}, "search_lang": {"en"}, "freshness": {"pw"}}
	if got := r.URL.Query(); got.Encode() != want.Encode() {
		t.Errorf("query %v, want %v", got, want)
	}
	got := text(res)
	for _, s := range []string{
		`Results for "go sync.Map" (brave):`,
		"1. sync package - sync - Go Packages\n   https://pkg.go.dev/sync\n   Package sync provides basic",
		"Map is like a Go map[any]any but is safe for concurrent use & more.",
		"2. Go maps in action - The Go Programming Language\n   https://go.dev/blog/maps\n   A quick overview of maps, and why sync.Map exists.",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("result lacks %q:\n%s", s, got)
		}
	}
	if strings.Contains(got, "<strong>") || strings.Contains(got, "3. Third") {
		t.Errorf("tags kept or count ignored:\n%s", got)
	}
	if n := len(res.Details["results"].([]any)); n != 2 {
		t.Errorf("%d results in the details", n)
	}
}

// TestBraveError: Brave's error body reaches the model with a hint; the
// key does not.
func TestBraveError(t *testing.T) {
	t.Parallel()
	srv, _ := fake(t, http.StatusUnauthorized, "brave_error.json")
	tool, err := New(Config{Provider: Brave, URL: srv.URL, APIKey: provider.Secret("BSA-test-key-123")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = call(t, tool, map[string]any{"query": "x"})
	if err == nil || !strings.Contains(err.Error(), "HTTP 401 Unauthorized: SUBSCRIPTION_TOKEN_INVALID The provided subscription token is invalid. (the worker's BRAVE_API_KEY was refused)") || strings.Contains(err.Error(), "BSA-test") {
		t.Fatalf("%v", err)
	}
}

// TestSearXNG: a SearXNG instance is asked at <url>/search with
// format=json, language and time_range; its results become title, URL and
// snippet.
func TestSearXNG(t *testing.T) {
	t.Parallel()
	srv, reqs := fake(t, http.StatusOK, "searxng.json")
	tool, err := New(Config{Provider: SearXNG, URL: srv.URL + "/searx/"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := call(t, tool, map[string]any{"query": "go sync.Map", "language": "en", "freshness": "month"})
	if err != nil {
		t.Fatal(err)
	}
	r := <-reqs
	want := url.Values{"q": {"go sync.Map"}, "format": {"json"}, "language": {"en"}, "time_range": {"month"}}
	if r.URL.Path != "/searx/search" || r.URL.Query().Encode() != want.Encode() {
		t.Errorf("request %s", r.URL)
	}
	if got := text(res); !strings.Contains(got, "2. Go maps in action\n   https://go.dev/blog/maps\n   A quick overview of maps & sync.Map.") {
		t.Errorf("result:\n%s", got)
	}
	// An instance without the JSON format answers 403.
	srv403, _ := fake(t, http.StatusForbidden, "brave_error.json")
	tool, _ = New(Config{Provider: SearXNG, URL: srv403.URL})
	if _, err := call(t, tool, map[string]any{"query": "x"}); err == nil || !strings.Contains(err.Error(), "search.formats") {
		t.Errorf("403: %v", err)
	}
}

// TestConfigAndArgs: what New and the model's arguments refuse.
func TestConfigAndArgs(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{}, {Provider: "google"}, {Provider: Brave}, {Provider: SearXNG}, {Provider: SearXNG, URL: "ftp://x"}, {Provider: SearXNG, URL: "http://x", MaxResults: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	srv, _ := fake(t, http.StatusOK, "searxng.json")
	tool, _ := New(Config{Provider: SearXNG, URL: srv.URL})
	for _, args := range []map[string]any{{}, {"query": " "}, {"query": strings.Repeat("a", 401)}, {"query": "x", "count": "many"},
		{"query": "x", "country": "Germany"}, {"query": "x", "freshness": "decade"}, {"query": "x", "language": "en_US!"}} {
		if _, err := call(t, tool, args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if !slices.Contains(tools.BuiltinNames(), Name) {
		t.Errorf("%s is not a reserved worker tool name", Name)
	}
}
