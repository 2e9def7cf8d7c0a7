package webfetch

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/netguard"
	"github.com/lanefleet/lanefleet/tools"
)

// setup is a web_fetch tool and a real local HTTP server it may reach only
// as "public.test" (a name the operator allowed, resolved to the server's
// loopback address by the test's resolver); "evil.test" resolves there
// too but is not allowed, like any public name whose DNS points inside.
type setup struct {
	tool *Tool
	srv  *httptest.Server
	port string
}

func newSetup(t *testing.T, h http.Handler, tweak ...func(*Config)) *setup {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	addr := netip.MustParseAddrPort(u.Host)
	pol, err := netguard.Parse([]string{"public.test"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Policy: pol, LookupNetIP: func(_ context.Context, _, host string) ([]netip.Addr, error) {
		switch host {
		case "public.test", "evil.test":
			return []netip.Addr{addr.Addr()}, nil
		case "metadata.test":
			return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
		}
		return net.DefaultResolver.LookupNetIP(context.Background(), "ip", host) // localhost
	}}
	for _, f := range tweak {
		f(&cfg)
	}
	tool, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &setup{tool: tool, srv: srv, port: u.Port()}
}

// url is the server's URL for path under host.
func (s *setup) url(host, path string) string { return "http://" + host + ":" + s.port + path }

func (s *setup) call(t *testing.T, args map[string]any) (tools.Result, error) {
	t.Helper()
	return s.tool.Call(t.Context(), tools.Call{ID: "c1", Name: Name, Args: args})
}

func text(r tools.Result) string { return message.Content{Blocks: r.Content}.Text() }

// TestFetchHTML: an allowed page comes back as markdown with its title
// and final URL; redirects within the allowed host are followed.
func TestFetchHTML(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>Hello</title><script>evil()</script></head><body><nav>menu</nav><h1>Greeting</h1><p>Hi <a href="/other">there</a>.</p></body></html>`)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/page", http.StatusFound) })
	s := newSetup(t, mux)
	res, err := s.call(t, map[string]any{"url": s.url("public.test", "/moved")})
	if err != nil {
		t.Fatal(err)
	}
	got := text(res)
	for _, want := range []string{"URL: " + s.url("public.test", "/page"), "Content-Type: text/html", "Title: Hello", "# Greeting", "Hi [there](" + s.url("public.test", "/other") + ")."} {
		if !strings.Contains(got, want) {
			t.Errorf("result lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "evil") || strings.Contains(got, "menu") {
		t.Errorf("script or nav kept:\n%s", got)
	}
	if res.Details["status"] != int64(200) || res.Details["truncated"] != false {
		t.Errorf("details %v", res.Details)
	}
	// The same in text mode, cut to 100 characters.
	res, err = s.call(t, map[string]any{"url": s.url("public.test", "/page"), "extractMode": "text", "maxChars": "5"})
	if err != nil || !strings.Contains(text(res), "\nGreeting\n") || strings.Contains(text(res), "#") {
		t.Fatalf("text mode: %q, %v", text(res), err)
	}
}

// TestGuardRefuses: whatever leads to a refused address is refused before
// a connection is made: the literal forms, a redirect to 127.0.0.1 from
// an allowed host, a public-looking name whose DNS answer is private, and
// localhost. The server counts the requests that reached it.
func TestGuardRefuses(t *testing.T) {
	t.Parallel()
	reached := make(chan string, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("/to-loopback", func(w http.ResponseWriter, r *http.Request) {
		_, port, _ := net.SplitHostPort(r.Host)
		http.Redirect(w, r, "http://127.0.0.1:"+port+"/secret", http.StatusFound)
	})
	mux.HandleFunc("/to-decimal", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://2130706433/secret", http.StatusFound)
	})
	mux.HandleFunc("/to-metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/secret", func(w http.ResponseWriter, r *http.Request) {
		reached <- r.Host
		fmt.Fprint(w, "SECRET")
	})
	s := newSetup(t, mux)
	for _, tc := range []struct{ url, want string }{
		{s.url("public.test", "/to-loopback"), "redirect refused: url \"http://127.0.0.1:" + s.port + "/secret\": 127.0.0.1 is a loopback address"},
		{s.url("public.test", "/to-decimal"), "numeric host"},
		{s.url("public.test", "/to-metadata"), "link-local cloud metadata"},
		{s.url("evil.test", "/secret"), "evil.test resolves to 127.0.0.1, a loopback address"},
		{s.url("metadata.test", "/secret"), "metadata.test resolves to 169.254.169.254"},
		{s.url("localhost", "/secret"), "loopback"},
		{s.url("127.0.0.1", "/secret"), "loopback"},
		{s.url("[::1]", "/secret"), "loopback"},
		{s.url("[::ffff:127.0.0.1]", "/secret"), "IPv4-mapped loopback"},
		{s.url("0.0.0.0", "/secret"), "unspecified"},
		{"http://2130706433:" + s.port + "/secret", "numeric host"},
		{"http://0177.0.0.1:" + s.port + "/secret", "numeric host"},
		{"http://0x7f.1:" + s.port + "/secret", "numeric host"},
		{"http://169.254.169.254/latest/meta-data/", "link-local cloud metadata"},
		{"http://10.0.0.1/", "private (RFC 1918)"},
		{"file:///etc/passwd", "only http and https"},
		{"http://user:pw@public.test/", "credentials"},
		{"public.test/page", "no scheme"},
	} {
		_, err := s.call(t, map[string]any{"url": tc.url})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.url, err, tc.want)
		}
	}
	select {
	case host := <-reached:
		t.Fatalf("a refused fetch reached the server (Host %s)", host)
	default:
	}
}

// TestGuardAllowsRange: an operator's range lets the loopback server be
// fetched by address.
func TestGuardAllowsRange(t *testing.T) {
	t.Parallel()
	s := newSetup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "plain text") }),
		func(c *Config) { c.Policy.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	res, err := s.call(t, map[string]any{"url": s.url("127.0.0.1", "/")})
	if err != nil || !strings.HasSuffix(text(res), "\n\nplain text") {
		t.Fatalf("%q, %v", text(res), err)
	}
}

// TestOversizeBody: a body longer than the cap (here endless) is read
// only up to the cap, and the model is told it was cut.
func TestOversizeBody(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	done := make(chan int64, 1)
	s := newSetup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		line := []byte(strings.Repeat("x", 1023) + "\n")
		var n int64
		for n < 1<<30 { // a gigabyte, unless the client hangs up
			if _, err := w.Write(line); err != nil {
				break
			}
			n += int64(len(line))
		}
		done <- n
	}), func(c *Config) { c.MaxResponseBytes = limit; c.MaxChars = 1 << 20 })
	res, err := s.call(t, map[string]any{"url": s.url("public.test", "/big")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Details["bytes"] != int64(limit) || res.Details["truncated"] != true {
		t.Errorf("details %v", res.Details)
	}
	if !strings.HasSuffix(text(res), "[the response was cut at 64 KB]") {
		t.Errorf("no notice: %q", text(res)[len(text(res))-80:])
	}
	if n := <-done; n >= 1<<30 {
		t.Errorf("the server wrote all %d bytes: the body was not abandoned", n)
	}
}

// TestRefusals: HTTP errors, content types other than HTML, text and
// JSON, too many redirects and a slow server are errors the model reads.
func TestRefusals(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n"))
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	s := newSetup(t, mux, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	for _, tc := range []struct{ path, want string }{
		{"/missing", "answered HTTP 404 Not Found"},
		{"/png", "reads HTML, text and JSON; this is image/png"},
		{"/loop", "stopped after 3 redirects"},
		{"/slow", "timed out after 300ms"},
	} {
		_, err := s.call(t, map[string]any{"url": s.url("public.test", tc.path)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.path, err, tc.want)
		}
	}
	res, err := s.call(t, map[string]any{"url": s.url("public.test", "/json")})
	if err != nil || !strings.HasSuffix(text(res), "\n\n{\"ok\":true}") {
		t.Errorf("json: %q, %v", text(res), err)
	}
	for _, args := range []map[string]any{{}, {"url": 5}, {"url": "http://public.test/", "extractMode": "pdf"}, {"url": "http://public.test/", "maxChars": "many"}} {
		if _, err := s.call(t, args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestNoEnvironmentProxy: the client never takes a proxy from the
// environment (HTTP_PROXY would route every fetch, and its checks, through
// another host).
func TestNoEnvironmentProxy(t *testing.T) {
	t.Parallel()
	s := newSetup(t, http.NotFoundHandler())
	if tr, ok := s.tool.client.Transport.(*http.Transport); !ok || tr.Proxy != nil {
		t.Fatal("the transport has a proxy function")
	}
}

// TestNameReserved: no remote or client tool may take web_fetch's name.
func TestNameReserved(t *testing.T) {
	t.Parallel()
	if !slices.Contains(tools.BuiltinNames(), Name) {
		t.Fatalf("%s is not among tools.BuiltinNames() %v", Name, tools.BuiltinNames())
	}
}
