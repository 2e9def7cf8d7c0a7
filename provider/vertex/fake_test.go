package vertex_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/provider/vertex"
)

// keys are the test's RSA keys, made once (2048-bit generation is slow).
var keys = sync.OnceValue(func() []*rsa.PrivateKey {
	out := make([]*rsa.PrivateKey, 3)
	for i := range out {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		out[i] = k
	}
	return out
})

// tokenServer is a Google OAuth token endpoint for service accounts: it
// takes the JWT bearer grant, verifies the assertion's RS256 signature
// with the account's public key and its claims (issuer, scope, audience,
// issue and expiry times), and issues an access token that lives
// lifetime. Each token it issues is recorded with its expiry; fetched
// receives the account of each issued token, and a fetch waits for gate
// when gate is set.
type tokenServer struct {
	*httptest.Server
	lifetime time.Duration
	next     time.Duration // when set, the lifetime of every token after the first

	mu       sync.Mutex
	accounts map[string]*rsa.PublicKey // by email
	issued   map[string]time.Time      // token → expiry
	byEmail  map[string]string         // token → email
	n        int
	gate     chan struct{}
	fetched  chan string
}

func newTokenServer(t testing.TB, lifetime time.Duration) *tokenServer {
	ts := &tokenServer{lifetime: lifetime, accounts: map[string]*rsa.PublicKey{}, issued: map[string]time.Time{},
		byEmail: map[string]string{}, fetched: make(chan string, 100)}
	ts.Server = httptest.NewServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tokenServer) tokenURL() string { return ts.URL + "/token" }

func (ts *tokenServer) add(email string, pub *rsa.PublicKey) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.accounts[email] = pub
}

// fetches is how many tokens were issued.
func (ts *tokenServer) fetches() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.n
}

// holds reports whether tok is a token it issued that has not expired,
// and whose account.
func (ts *tokenServer) holds(tok string) (string, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	exp, ok := ts.issued[tok]
	return ts.byEmail[tok], ok && time.Now().Before(exp)
}

func (ts *tokenServer) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(code, desc string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
	}
	if r.Method != http.MethodPost || r.URL.Path != "/token" {
		http.NotFound(w, r)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<16)
	if err := r.ParseForm(); err != nil {
		fail("invalid_request", err.Error())
		return
	}
	if g := r.PostForm.Get("grant_type"); g != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		fail("unsupported_grant_type", g)
		return
	}
	parts := strings.Split(r.PostForm.Get("assertion"), ".")
	if len(parts) != 3 {
		fail("invalid_grant", "assertion is not a JWT")
		return
	}
	var head struct{ Alg, Typ, Kid string }
	var claims struct {
		Iss, Scope, Aud string
		Iat, Exp        int64
	}
	if decodeSeg(parts[0], &head) != nil || decodeSeg(parts[1], &claims) != nil {
		fail("invalid_grant", "malformed JWT")
		return
	}
	ts.mu.Lock()
	pub := ts.accounts[claims.Iss]
	ts.mu.Unlock()
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	now := time.Now().Unix()
	switch {
	case head.Alg != "RS256" || head.Typ != "JWT" || head.Kid == "":
		fail("invalid_grant", "header "+parts[0])
	case pub == nil:
		fail("invalid_grant", "unknown account "+claims.Iss)
	case err != nil || rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) != nil:
		fail("invalid_grant", "Invalid JWT Signature.")
	case claims.Scope != vertex.Scope || claims.Aud != ts.tokenURL():
		fail("invalid_scope", "scope "+claims.Scope+" audience "+claims.Aud)
	case claims.Iat > now+60 || claims.Exp <= now || claims.Exp-claims.Iat > 3600:
		fail("invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.")
	default:
		ts.mu.Lock()
		gate := ts.gate
		ts.mu.Unlock()
		if gate != nil {
			<-gate
		}
		ts.mu.Lock()
		ts.n++
		tok := fmt.Sprintf("ya29.%s.%d", strings.Split(claims.Iss, "@")[0], ts.n)
		life := ts.lifetime
		if ts.n > 1 && ts.next > 0 {
			life = ts.next
		}
		ts.issued[tok] = time.Now().Add(life)
		ts.byEmail[tok] = claims.Iss
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(life / time.Second)})
		ts.fetched <- claims.Iss
	}
}

func decodeSeg(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// serviceAccount returns the key file JSON of a service account of
// project, signed with key k, registered with the token server.
func serviceAccount(t testing.TB, ts *tokenServer, name, project string, k *rsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	email := name + "@" + project + ".iam.gserviceaccount.com"
	ts.add(email, &k.PublicKey)
	b, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": project, "private_key_id": "kid-" + name,
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": email, "client_id": "1000" + name, "token_uri": ts.tokenURL(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// vertexServer is Vertex AI: it answers a call only with a bearer token
// the token server issued and not yet expired, on a publisher model's
// path of the expected project and location; answer gives the rest.
type vertexServer struct {
	*httptest.Server
	requests atomic.Int64
}

var pathRe = regexp.MustCompile(`^/v1/projects/([a-z0-9-]+)/locations/([a-z0-9-]+)/publishers/(google|anthropic)/models/([^/:]+):(streamGenerateContent|streamRawPredict)$`)

// call is one request as the Vertex server saw it.
type call struct {
	project, location, publisher, model, method, account string
	body                                                 map[string]any
	header                                               http.Header
}

func newVertexServer(t testing.TB, ts *tokenServer, answer func(w http.ResponseWriter, c call)) *vertexServer {
	vs := &vertexServer{}
	vs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vs.requests.Add(1)
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		acct, held := ts.holds(tok)
		if !ok || !held {
			wiretest.Reply(w, 401, map[string]string{"Content-Type": "application/json; charset=UTF-8"},
				[]byte(`{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`), 0)
			return
		}
		m := pathRe.FindStringSubmatch(r.URL.Path)
		if m == nil || (m[3] == "google") != (m[5] == "streamGenerateContent") || (m[5] == "streamGenerateContent") != (r.URL.RawQuery == "alt=sse") {
			wiretest.Reply(w, 404, map[string]string{"Content-Type": "text/html"}, []byte("<html>404 "+r.URL.Path+"</html>"), 0)
			return
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			wiretest.Reply(w, 400, nil, []byte(err.Error()), 0)
			return
		}
		answer(w, call{project: m[1], location: m[2], publisher: m[3], model: m[4], method: m[5], account: acct, body: body, header: r.Header})
	}))
	t.Cleanup(vs.Close)
	return vs
}

// sseReply writes an SSE body in 7-byte flushed pieces.
func sseReply(w http.ResponseWriter, body []byte) {
	wiretest.Reply(w, 200, map[string]string{"Content-Type": "text/event-stream"}, body, 7)
}

// model returns a catalog-like model of the Vertex providers at base.
func model(base, api, id string) provider.Model {
	prov := "vertex"
	if api == "anthropic-vertex" {
		prov = "vertex-anthropic"
	}
	return provider.Model{ID: id, Provider: prov, API: api, BaseURL: base, Reasoning: true, Input: []string{"text", "image"},
		ContextWindow: 200000, MaxTokens: 64000, Cost: provider.ModelCost{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}}
}

// compact renders a request body as compact JSON, keys sorted.
func compact(body map[string]any) string {
	b, err := json.Marshal(body)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
