package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/gateway/auth"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	tok, hash := NewToken()
	if !strings.HasPrefix(tok, TokenPrefix) || len(tok) != len(TokenPrefix)+43 {
		t.Fatalf("token %q", tok)
	}
	good := `{"tokens":[{"name":"a","hash":"` + hash + `","role":"sender","prefixes":["a:"],"rate":60,"concurrency":2}]}`
	cases := []struct {
		name, file, err string
	}{
		{"good", good, ""},
		{"no tokens", `{"tokens":[]}`, "no tokens"},
		{"unknown field", `{"tokens":[{"name":"a","hash":"` + hash + `","role":"sender","token":"x"}]}`, "unknown field"},
		{"plain token as hash", `{"tokens":[{"name":"a","hash":"` + tok + `","role":"sender"}]}`, "sha256:"},
		{"short hash", `{"tokens":[{"name":"a","hash":"sha256:abcd","role":"sender"}]}`, "64 hex"},
		{"bad role", `{"tokens":[{"name":"a","hash":"` + hash + `","role":"root"}]}`, "role must be"},
		{"no name", `{"tokens":[{"hash":"` + hash + `","role":"admin"}]}`, "name must be"},
		{"same token twice", `{"tokens":[{"name":"a","hash":"` + hash + `","role":"admin"},{"name":"b","hash":"` + hash + `","role":"admin"}]}`, "same token"},
		{"negative rate", `{"tokens":[{"name":"a","hash":"` + hash + `","role":"admin","rate":-1}]}`, "negative"},
		{"bad session", `{"tokens":[{"name":"a","hash":"` + hash + `","role":"admin","sessions":[""]}]}`, "session"},
	}
	for _, c := range cases {
		tt, err := ParseTokens(strings.NewReader(c.file))
		if c.err == "" {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			e := tt.lookup(tok)
			if e == nil || e.principal.Name != "a" || e.principal.Role != auth.Sender || !e.principal.AllowsSession("a:1") {
				t.Fatalf("%s: lookup: %+v", c.name, e)
			}
			if tt.lookup(tok+"x") != nil || tt.lookup("") != nil || tt.lookup(strings.Repeat("x", 10000)) != nil {
				t.Fatalf("%s: a wrong token matched", c.name)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Fatalf("%s: err %v, want %q", c.name, err, c.err)
		}
	}
}

func TestCheckListen(t *testing.T) {
	t.Parallel()
	cases := []struct {
		addr   string
		tokens bool
		ok     bool
	}{
		{"127.0.0.1:8080", false, true},
		{"[::1]:8080", false, true},
		{"localhost:8080", false, true},
		{"0.0.0.0:8080", false, false},
		{":8080", false, false},
		{"192.0.2.1:8080", false, false},
		{"0.0.0.0:8080", true, true},
		{"nonsense", true, false},
	}
	for _, c := range cases {
		err := CheckListen(c.addr, c.tokens)
		if (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, %v) = %v", c.addr, c.tokens, err)
		}
	}
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	l := newLimiter(TokenEntry{Rate: 60, Burst: 2})
	for i := range 2 {
		if ok, _ := l.acquire(now); !ok {
			t.Fatalf("request %d refused within the burst", i)
		}
		l.release()
	}
	ok, after := l.acquire(now)
	if ok || after != time.Second {
		t.Fatalf("third at once: ok %v after %v, want refused for 1s", ok, after)
	}
	if ok, _ := l.acquire(now.Add(time.Second)); !ok {
		t.Fatal("refused after the refill")
	}
	c := newLimiter(TokenEntry{Concurrency: 1})
	if ok, _ := c.acquire(now); !ok {
		t.Fatal("first refused")
	}
	if ok, _ := c.acquire(now); ok {
		t.Fatal("second in flight allowed")
	}
	c.release()
	if ok, _ := c.acquire(now); !ok {
		t.Fatal("refused after the release")
	}
}

// TestAuthentication: a token file's gateway answers no token, a wrong
// one and a wrong scheme with 401 and WWW-Authenticate; the roles' limits
// with 403; public routes answer anyone.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	resp := b.do(t, "", "GET", "/healthz", "")
	if resp.StatusCode != 200 {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
	resp.Body.Close()
	resp = b.do(t, "", "GET", "/api/sessions/acme:1/history", "")
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}
	wantProblem(t, resp, 401, CodeUnauthorized)
	b.tokens["forged"] = b.tokens["acme"] + "x"
	wantProblem(t, b.do(t, "forged", "GET", "/api/sessions/acme:1/history", ""), 401, CodeUnauthorized)
	wantProblem(t, b.do(t, "", "GET", "/api/sessions/acme:1/history", "", "Authorization", "Basic "+b.tokens["acme"]), 401, CodeUnauthorized)
	wantProblem(t, b.do(t, "acme-viewer", "POST", "/api/sessions/acme:1/messages", `{"text":"hi"}`), 403, CodeForbidden)
	wantProblem(t, b.do(t, "acme", "GET", "/api/dead-letters", ""), 403, CodeForbidden)
	wantProblem(t, b.do(t, "acme", "GET", "/metrics", ""), 403, CodeForbidden)
	wantProblem(t, b.do(t, "globex", "POST", "/api/sessions/globex:1/messages", `{"text":"hi","model":"scripted/script"}`), 403, CodeForbidden)
	resp = b.do(t, "root", "GET", "/metrics", "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "lanefleet_gateway_requests_total") || !strings.Contains(string(body), "lanefleet_gateway_open_streams") {
		t.Fatalf("metrics: %d %.300s", resp.StatusCode, body)
	}
	wantProblem(t, b.do(t, "root", "GET", "/api/nowhere", ""), 404, CodeNotFound)
	wantProblem(t, b.do(t, "root", "DELETE", "/api/sessions/acme:1/history", ""), 405, CodeMethodAllowed)
}

// TestOpenAIShapedErrors: the middleware's refusals on /v1/ routes come in
// the OpenAI error shape, which the SDKs parse.
func TestOpenAIShapedErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noFleet: true})
	resp := b.do(t, "", "GET", "/v1/models", "")
	defer resp.Body.Close()
	var e struct {
		Error struct {
			Message, Type, Code string
			Param               *string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	// No route yet on /v1/models without gateway/openai: 404, OpenAI-shaped.
	if resp.StatusCode != 404 || e.Error.Type != "not_found_error" || e.Error.Code != CodeNotFound {
		t.Fatalf("%d %+v", resp.StatusCode, e)
	}
}

// TestLoopbackOnlyWithoutTokens: a gateway without a token file serves a
// loopback caller as the local admin and refuses any other address.
func TestLoopbackOnlyWithoutTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noTokens: true, noFleet: true})
	resp := b.do(t, "", "GET", "/metrics", "")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("loopback caller: %d", resp.StatusCode)
	}
	for _, addr := range []string{"192.0.2.7:4000", "[2001:db8::1]:4000", "garbage"} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		b.srv.ServeHTTP(rec, req)
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), "loopback clients only") {
			t.Fatalf("%s: %d %s", addr, rec.Code, rec.Body)
		}
	}
}

// TestRateLimit: past its burst a token gets 429 with Retry-After; past
// its concurrency too; another token is not affected.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noFleet: true, tokens: []TokenEntry{
		{Name: "slow", Role: auth.Admin, Prefixes: []string{""}, Rate: 1, Burst: 2},
		{Name: "other", Role: auth.Admin, Prefixes: []string{""}},
	}})
	for range 2 {
		resp := b.do(t, "slow", "GET", "/metrics", "")
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("within the burst: %d", resp.StatusCode)
		}
	}
	resp := b.do(t, "slow", "GET", "/metrics", "")
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	wantProblem(t, resp, 429, CodeRateLimited)
	resp = b.do(t, "other", "GET", "/metrics", "")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("other token: %d", resp.StatusCode)
	}
}

// TestCORS: off unless configured; an allowed origin gets its headers and
// a preflight answer without a token.
func TestCORS(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noFleet: true, cfg: func(c *Config) { c.CORSOrigins = []string{"https://app.example"} }})
	resp := b.do(t, "", "OPTIONS", "/api/sessions/acme:1/messages", "", "Origin", "https://app.example", "Access-Control-Request-Method", "POST")
	resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Last-Event-ID") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	// A browser's MCP client sends the protocol version it negotiated.
	resp = b.do(t, "", "OPTIONS", "/mcp", "", "Origin", "https://app.example", "Access-Control-Request-Method", "POST")
	resp.Body.Close()
	if resp.StatusCode != 204 || !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Mcp-Protocol-Version") {
		t.Fatalf("preflight of /mcp: %d %v", resp.StatusCode, resp.Header)
	}
	resp = b.do(t, "root", "GET", "/healthz", "", "Origin", "https://evil.example")
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS headers for an origin not configured")
	}
	nb := setup(t, setupOpts{noFleet: true})
	resp = nb.do(t, "root", "GET", "/healthz", "", "Origin", "https://app.example")
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS on without configuration")
	}
	_ = http.StatusOK
}
