package send_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/refused"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/send"
	"github.com/lanefleet/lanefleet/provider/internal/stream"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
)

func TestJoinURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base, ref, want string
	}{
		// The SDKs' joins: the base path is a directory, with or without its slash.
		{"https://api.anthropic.com", "v1/messages", "https://api.anthropic.com/v1/messages"},
		{"https://api.anthropic.com/", "v1/messages", "https://api.anthropic.com/v1/messages"},
		{"https://api.openai.com/v1", "chat/completions", "https://api.openai.com/v1/chat/completions"},
		{"https://api.openai.com/v1/", "responses", "https://api.openai.com/v1/responses"},
		{"http://127.0.0.1:8080/proxy/anth", "v1/messages", "http://127.0.0.1:8080/proxy/anth/v1/messages"},
		// A leading slash on the path does not escape the base path.
		{"https://openrouter.ai/api/v1", "/chat/completions", "https://openrouter.ai/api/v1/chat/completions"},
		// The base's query and fragment are dropped, as the SDKs dropped them.
		{"https://h/v1?api-version=2#x", "chat/completions", "https://h/v1/chat/completions"},
		// A colon in the first segment is a path, not a scheme; the query stays.
		{"https://h/v1beta", "models/gemini-3-pro:streamGenerateContent?alt=sse", "https://h/v1beta/models/gemini-3-pro:streamGenerateContent?alt=sse"},
		// Escapes in the path survive the join.
		{"https://h/v1beta", "models/a%2Fb:streamGenerateContent", "https://h/v1beta/models/a%2Fb:streamGenerateContent"},
		{"https://h/p%2Fq", "x", "https://h/p%2Fq/x"},
	} {
		u, err := send.JoinURL(tc.base, tc.ref)
		if err != nil || u.String() != tc.want {
			t.Errorf("JoinURL(%q, %q) = %v, %v; want %s", tc.base, tc.ref, u, err, tc.want)
		}
	}
}

func TestJoinURLRejects(t *testing.T) {
	t.Parallel()
	for _, base := range []string{
		"api.anthropic.com",             // no scheme: net/http would fail every request
		"ftp://user:hunter2@h/v1",       // not http(s)
		"http://",                       // no host
		"/v1",                           // relative
		"http://user:hunter2@h\x7f/v1",  // unparsable, with credentials
		"http://user:hunter2@[::1/v1",   // unparsable, with credentials
		"file:///etc/passwd",            // a local file
		"unix://user:hunter2@/var/sock", // not http(s)
	} {
		_, err := send.JoinURL(base, "v1/messages")
		if !errors.Is(err, send.ErrBaseURL) {
			t.Errorf("JoinURL(%q) = %v, want ErrBaseURL", base, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error repeats credentials: %v", err)
		}
	}
}

// post sends a request to url through p with a fresh watch.
func post(t *testing.T, p *send.Pool, url string, h http.Header) (*http.Response, *provider.Error) {
	t.Helper()
	u, err := send.JoinURL(url, "v1/x")
	if err != nil {
		t.Fatal(err)
	}
	w := stream.NewWatch(t.Context(), 0)
	t.Cleanup(w.Stop)
	return p.Post(t.Context(), w, send.Request{Name: "test", URL: u, Header: h, Body: []byte(`{"a":1}`), Key: "sk-secret", Now: time.Now})
}

func TestPostSends(t *testing.T) {
	t.Parallel()
	var got *http.Request
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, body = r, must(io.ReadAll(r.Body))
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {}\n\n")
	}))
	t.Cleanup(srv.Close)
	h := http.Header{}
	h.Set("x-api-key", "k")
	h.Set("User-Agent", "mine") // a configured header replaces a default
	resp, perr := post(t, send.NewPool(nil), srv.URL, h)
	if perr != nil {
		t.Fatal(perr)
	}
	if b := string(must(io.ReadAll(resp.Body))); b != "data: {}\n\n" {
		t.Errorf("body %q", b)
	}
	_ = resp.Body.Close()
	want := map[string]string{"Content-Type": "application/json", "Accept": "text/event-stream", "User-Agent": "mine", "X-Api-Key": "k"}
	for k, v := range want {
		if got.Header.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, got.Header.Get(k), v)
		}
	}
	if got.Method != http.MethodPost || got.URL.Path != "/v1/x" || string(body) != `{"a":1}` || got.ContentLength != 7 {
		t.Errorf("%s %s %q length %d", got.Method, got.URL.Path, body, got.ContentLength)
	}
	for k := range got.Header {
		if strings.HasPrefix(k, "X-Stainless") {
			t.Errorf("SDK header %s", k)
		}
	}
}

// TestPostPastBuffers: request and response headers and body lines
// longer than a connection's buffers (ConnBufferSize) go through whole,
// the body chunked and flushed in pieces as a model streams it.
func TestPostPastBuffers(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 3*send.ConnBufferSize)
	line := "data: " + strings.Repeat("d", 8*send.ConnBufferSize) + "\n\n"
	sent := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent <- r.Header.Get("x-api-key")
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Long", long)
		for i := 0; i < len(line); i += 1000 {
			_, _ = io.WriteString(w, line[i:min(i+1000, len(line))])
			http.NewResponseController(w).Flush() //nolint:errcheck // the client's read shows a failure
		}
	}))
	t.Cleanup(srv.Close)
	h := http.Header{}
	h.Set("x-api-key", long)
	resp, perr := post(t, send.NewPool(nil), srv.URL, h)
	if perr != nil {
		t.Fatal(perr)
	}
	defer resp.Body.Close()
	if b := string(must(io.ReadAll(resp.Body))); b != line {
		t.Errorf("body of %d bytes, want %d", len(b), len(line))
	}
	if got := <-sent; got != long || resp.Header.Get("X-Long") != long {
		t.Errorf("headers of %d and %d bytes, want %d", len(got), len(resp.Header.Get("X-Long")), len(long))
	}
}

func TestPostDefaultUserAgent(t *testing.T) {
	t.Parallel()
	ua := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ua <- r.Header.Get("User-Agent")
		w.Header().Set("Content-Type", "text/event-stream")
	}))
	t.Cleanup(srv.Close)
	resp, perr := post(t, send.NewPool(nil), srv.URL, nil)
	if perr != nil {
		t.Fatal(perr)
	}
	_ = resp.Body.Close()
	if got := <-ua; got != send.UserAgent {
		t.Errorf("User-Agent %q", got)
	}
}

// TestPostErrors pins how a response that is not an event stream is
// reported: every status of 300 or more is an HTTP error with the
// provider's message, a 2xx JSON body is an error in the body.
func TestPostErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		status      int
		ctype, body string
		header      map[string]string
		reason      provider.Reason
		msg         string
		retryAfter  time.Duration
	}{
		{"html 502", 502, "text/html", "<html>bad gateway</html>", nil, provider.ReasonTimeout, "502 <html>bad gateway</html>", 0},
		{"anthropic 429", 429, "application/json", `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, map[string]string{"Retry-After": "23"}, provider.ReasonRateLimit, "slow down", 23 * time.Second},
		{"openai 401", 401, "application/json", `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`, nil, provider.ReasonAuthPermanent, "Incorrect API key provided", 0},
		{"not json 400", 400, "application/json", "not json", nil, provider.ReasonFormat, "not json", 0},
		// The reference's status table: 503 is timeout unless the body says
		// the service is overloaded.
		{"empty 503", 503, "", "", nil, provider.ReasonTimeout, "Service Unavailable", 0},
		{"200 json error", 200, "application/json", `{"error":{"message":"boom","type":"server_error"}}`, nil, provider.ReasonTimeout, "boom", 0},
		// A 3xx that reaches Post (no Location here) is an error, not an empty stream.
		{"bare 301", 301, "text/plain", "", nil, provider.ReasonUnknown, "Moved Permanently", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				if tc.ctype != "" {
					w.Header().Set("Content-Type", tc.ctype)
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(srv.Close)
			resp, perr := post(t, send.NewPool(nil), srv.URL, nil)
			if perr == nil {
				_ = resp.Body.Close()
				t.Fatal("no error")
			}
			wantStatus := tc.status
			if tc.status < 300 {
				wantStatus = 0
			}
			if perr.Reason != tc.reason || perr.Message != tc.msg || perr.Status != wantStatus || perr.RetryAfter != tc.retryAfter {
				t.Errorf("got %s %d %q retry %v", perr.Reason, perr.Status, perr.Message, perr.RetryAfter)
			}
		})
	}
}

// TestPostRedirects: a redirect within the origin is followed; one to
// another host is not, so the key in x-api-key never reaches it.
func TestPostRedirects(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
	}))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/x":
			http.Redirect(w, r, "/v2/x", http.StatusTemporaryRedirect)
		case "/v2/x":
			if r.Method != http.MethodPost || r.Header.Get("X-Api-Key") != "k" || string(must(io.ReadAll(r.Body))) != `{"a":1}` {
				http.Error(w, "lost the request on the way", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
		case "/away/v1/x":
			http.Redirect(w, r, other.URL+"/v1/x", http.StatusTemporaryRedirect)
		}
	}))
	t.Cleanup(srv.Close)
	h := http.Header{}
	h.Set("x-api-key", "k")
	p := send.NewPool(nil)
	resp, perr := post(t, p, srv.URL, h)
	if perr != nil {
		t.Fatalf("same-origin redirect: %v", perr)
	}
	_ = resp.Body.Close()
	_, perr = post(t, p, srv.URL+"/away", h)
	if perr == nil || perr.Status != http.StatusTemporaryRedirect {
		t.Fatalf("cross-origin redirect: %v", perr)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the other host got %d requests", n)
	}
}

// TestPostRefused: a refused connection says so; it is not reported as a
// stall or a timeout, and the key is not in the message.
func TestPostRefused(t *testing.T) {
	t.Parallel()
	addr := refused.Addr(t)
	_, perr := post(t, send.NewPool(nil), "http://"+addr, nil)
	if perr == nil {
		t.Fatal("no error")
	}
	msg := strings.ToLower(perr.Message)
	if !strings.Contains(msg, "connection refused") || strings.Contains(msg, "timeout") || strings.Contains(msg, "stalled") || strings.Contains(msg, "timed out") {
		t.Errorf("message %q", perr.Message)
	}
	if !strings.HasPrefix(perr.Message, "test: send request: ") || perr.Reason == provider.ReasonAborted {
		t.Errorf("%s %q", perr.Reason, perr.Message)
	}
}

// TestPoolConnections: rounds of concurrent requests, one per slot, open at
// most one connection per slot over all rounds. The server holds each round
// until all its requests have arrived, so every round needs as many
// connections as slots at once: net/http's default of two idle connections
// per host would close the others between rounds and dial them again.
func TestPoolConnections(t *testing.T) {
	t.Parallel()
	const slots, rounds = 8, 20
	var dialed atomic.Int32
	srv := httptest.NewUnstartedServer(wiretest.Rounds(slots, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {}\n\n")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p := send.NewPool(nil)
	u := must(send.JoinURL(srv.URL, "v1/x"))
	for range rounds {
		var wg sync.WaitGroup
		for range slots {
			wg.Go(func() {
				w := stream.NewWatch(t.Context(), 0)
				defer w.Stop()
				resp, perr := p.Post(t.Context(), w, send.Request{Name: "test", URL: u, Body: []byte("{}"), Now: time.Now})
				if perr != nil {
					t.Error(perr)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			})
		}
		wg.Wait()
	}
	// A few more may be net/http's own under load (see wiretest.Reuse);
	// the default idle bound would lose six every round.
	if n := dialed.Load(); n > slots+rounds/2 {
		t.Errorf("%d connections for %d slots", n, slots)
	}
}

// TestPoolPerOrigin: one client per origin, whatever the path; a fixed
// client is used for everything.
func TestPoolPerOrigin(t *testing.T) {
	t.Parallel()
	p := send.NewPool(nil)
	a1 := p.Client(must(send.JoinURL("https://api.z.ai/api/coding/paas/v4", "x")))
	a2 := p.Client(must(send.JoinURL("https://API.Z.AI/api/paas/v4", "x")))
	b := p.Client(must(send.JoinURL("https://api.mistral.ai/v1", "x")))
	c := p.Client(must(send.JoinURL("http://api.mistral.ai/v1", "x")))
	if a1 != a2 || a1 == b || b == c {
		t.Errorf("clients: same origin %v, other host %v, other scheme %v", a1 == a2, a1 != b, b != c)
	}
	fixed := &http.Client{}
	if send.NewPool(fixed).Client(must(send.JoinURL("https://h", "x"))) != fixed {
		t.Error("fixed client not used")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
