package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/anthropic"
)

// tokenServer speaks the OAuth token endpoint's refresh_token grant as
// Anthropic's does: a form-encoded POST, a JSON answer with a new access
// token and a rotated refresh token (the old one stops working), and
// 400 invalid_grant for a refresh token it does not hold. It also serves
// the Messages API, which takes only the access tokens it issued.
type tokenServer struct {
	*httptest.Server
	t        *testing.T
	clientID string

	mu       sync.Mutex
	refresh  string          // the one refresh token that works
	issued   map[string]bool // access tokens the API takes
	requests int             // refresh requests received
	n        int             // tokens issued
	// arrived gets each refresh request's refresh token, before its answer.
	arrived chan string
	// hold, when set, blocks each refresh after it rotated the tokens
	// until it is closed (or the client goes away).
	hold chan struct{}
	// onUse is called with each access token the Messages API takes.
	onUse func(tok string)
}

func newTokenServer(t *testing.T, refresh string) *tokenServer {
	ts := &tokenServer{t: t, clientID: "test-client", refresh: refresh, issued: map[string]bool{}, arrived: make(chan string, 64)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/oauth/token", ts.token)
	mux.HandleFunc("POST /v1/messages", ts.messages)
	ts.Server = httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tokenServer) token(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		ts.t.Errorf("token request content type %q", ct)
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if g, c := r.PostForm.Get("grant_type"), r.PostForm.Get("client_id"); g != "refresh_token" || c != ts.clientID {
		ts.t.Errorf("grant_type %q client_id %q", g, c)
	}
	rt := r.PostForm.Get("refresh_token")
	ts.mu.Lock()
	ts.requests++
	ok := rt != "" && rt == ts.refresh
	var access, next string
	if ok {
		ts.n++
		access, next = fmt.Sprintf("sk-ant-oat01-access-%d", ts.n), fmt.Sprintf("sk-ant-ort01-refresh-%d", ts.n)
		ts.refresh = next // rotated: rt stops working now
		ts.issued[access] = true
	}
	hold := ts.hold
	ts.mu.Unlock()
	ts.arrived <- rt
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"invalid_grant","error_description":"Refresh token not found or invalid"}`))
		return
	}
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": access, "refresh_token": next, "expires_in": 28800, "token_type": "Bearer"})
}

func (ts *tokenServer) messages(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	ts.mu.Lock()
	ok := ts.issued[tok] && strings.Contains(r.Header.Get("Anthropic-Beta"), "oauth-2025-04-20")
	use := ts.onUse
	ts.mu.Unlock()
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"OAuth token has expired."}}`))
		return
	}
	if use != nil {
		use(tok)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range []string{
		`message_start`, `{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}`,
		`content_block_start`, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`content_block_delta`, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello"}}`,
		`content_block_stop`, `{"type":"content_block_stop","index":0}`,
		`message_delta`, `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`,
		`message_stop`, `{"type":"message_stop"}`,
	} {
		if strings.HasPrefix(ev, "{") {
			fmt.Fprintf(w, "data: %s\n\n", ev)
		} else {
			fmt.Fprintf(w, "event: %s\n", ev)
		}
	}
}

// revoke makes the API refuse every access token issued so far.
func (ts *tokenServer) revoke() {
	ts.mu.Lock()
	clear(ts.issued)
	ts.mu.Unlock()
}

func (ts *tokenServer) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.requests
}

// oauthFleet is one embedded NATS server with the auth bucket, on which
// each worker opens its own Store and OAuth.
type oauthFleet struct {
	t   *testing.T
	srv *natstest.Server
	ts  *tokenServer
}

func newOAuthFleet(t *testing.T, refresh string) *oauthFleet {
	return &oauthFleet{t: t, srv: natstest.Start(t), ts: newTokenServer(t, refresh)}
}

// store opens an authstore.Store on a connection of its own, as a
// worker does.
func (f *oauthFleet) store() *authstore.Store {
	js, err := jetstream.New(natstest.Connect(f.t, f.srv.URL))
	if err != nil {
		f.t.Fatal(err)
	}
	s, err := authstore.Open(f.t.Context(), js, authstore.Config{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = s.Close() })
	return s
}

// worker opens a worker's OAuth over a Store of its own.
func (f *oauthFleet) worker(name string) *anthropic.OAuth {
	o, err := anthropic.NewOAuth(anthropic.OAuthConfig{Store: f.store(), TokenURL: f.ts.URL + "/v1/oauth/token",
		ClientID: f.ts.clientID, Owner: name, Poll: 10 * time.Millisecond})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(o.Close)
	return o
}

// record reads the stored tokens of a profile.
func (f *oauthFleet) record(s *authstore.Store, id string) (access, refresh string) {
	data, _, err := s.LoadOAuth(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	var r struct{ Access, Refresh string }
	if err := json.Unmarshal(data, &r); err != nil {
		f.t.Fatal(err)
	}
	return r.Access, r.Refresh
}

// call makes one Messages call with tok.
func (f *oauthFleet) call(tok provider.Secret) (message.Message, error) {
	req := &provider.Request{Model: model(f.ts.URL, "claude-sonnet-4-5"), Messages: []message.Message{message.User("hi", 1)}, APIKey: tok}
	return anthropic.New(anthropic.Config{}).Stream(f.t.Context(), req, nil)
}

var sub = anthropic.OAuthProfile{ID: "anthropic:sub", Refresh: "sk-ant-ort01-seed", From: "refreshRef file:/run/secrets/claude"}

// TestOAuthTwoWorkersOneRefresh: two workers (two Stores on one
// server) and many calls on each need a token while the first refresh is
// in flight: the token endpoint is asked once, the worker that lost the
// claim waits for the winner's tokens, and every call gets the new access
// token, which the Messages API takes.
func TestOAuthTwoWorkersOneRefresh(t *testing.T) {
	t.Parallel()
	f := newOAuthFleet(t, "sk-ant-ort01-seed")
	f.ts.hold = make(chan struct{})
	a, b := f.worker("worker-a"), f.worker("worker-b")

	const calls = 8
	toks := make(chan provider.Secret, 2*calls)
	errs := make(chan error, 2*calls)
	var wg sync.WaitGroup
	get := func(o *anthropic.OAuth) {
		defer wg.Done()
		tok, err := o.Token(t.Context(), sub)
		toks <- tok
		errs <- err
	}
	wg.Add(1)
	go get(a)
	if rt := <-f.ts.arrived; rt != "sk-ant-ort01-seed" {
		t.Fatalf("refreshed with %q", rt)
	}
	// The refresh is in flight (rotated at the endpoint, not answered):
	// every other call, on both workers, asks now.
	for i := range 2*calls - 1 {
		wg.Add(1)
		go get([]*anthropic.OAuth{a, b}[i%2])
	}
	close(f.ts.hold)
	wg.Wait()
	close(toks)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for tok := range toks {
		if tok.Reveal() != "sk-ant-oat01-access-1" {
			t.Fatalf("token %q, want the one refresh's", tok.Reveal())
		}
		if msg, err := f.call(tok); err != nil || msg.StopReason != message.StopStop {
			t.Fatalf("messages call: %v %v", msg.StopReason, err)
		}
	}
	if n := f.ts.count(); n != 1 {
		t.Errorf("%d token requests, want 1", n)
	}
}

// TestOAuthStoredBeforeUse: when the Messages API first sees the new
// access token, the store already holds it with the rotated refresh
// token, so a worker that stops after its first call leaves the fleet a
// working pair.
func TestOAuthStoredBeforeUse(t *testing.T) {
	t.Parallel()
	f := newOAuthFleet(t, "sk-ant-ort01-seed")
	a, other := f.worker("worker-a"), f.store()
	var seen []string
	f.ts.onUse = func(tok string) {
		access, refresh := f.record(other, sub.ID)
		seen = append(seen, tok, access, refresh)
	}
	tok, err := a.Token(t.Context(), sub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.call(tok); err != nil {
		t.Fatal(err)
	}
	want := []string{"sk-ant-oat01-access-1", "sk-ant-oat01-access-1", "sk-ant-ort01-refresh-1"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("at first use: token, stored access, stored refresh = %q, want %q", seen, want)
	}
}

// TestOAuthRefused: a refresh token the endpoint refuses (invalid_grant)
// fails the profile as auth_permanent with what to do; the refusal is
// kept, so neither worker asks with that token again; a new refresh token
// given to the profile (the operator's new login) starts over.
func TestOAuthRefused(t *testing.T) {
	t.Parallel()
	f := newOAuthFleet(t, "sk-ant-ort01-other")
	a, b := f.worker("worker-a"), f.worker("worker-b")
	_, err := a.Token(t.Context(), sub)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Reason != provider.ReasonAuthPermanent {
		t.Fatalf("err %v, want auth_permanent", err)
	}
	want := `Anthropic OAuth refresh failed: invalid_grant: Refresh token not found or invalid — log in again with Claude Code (/login) and give auth profile "anthropic:sub" the new refresh token (claudeAiOauth.refreshToken of ~/.claude/.credentials.json) in its refreshRef file:/run/secrets/claude`
	if pe.Message != want {
		t.Errorf("message\n%s\nwant\n%s", pe.Message, want)
	}
	if _, err := b.Token(t.Context(), sub); !errors.As(err, &pe) || pe.Message != want {
		t.Errorf("other worker: %v", err)
	}
	if n := f.ts.count(); n != 1 {
		t.Errorf("%d token requests, want 1: a refused refresh token is not sent again", n)
	}
	relogin := sub
	relogin.Refresh = "sk-ant-ort01-other"
	tok, err := b.Token(t.Context(), relogin)
	if err != nil || tok.Reveal() != "sk-ant-oat01-access-1" {
		t.Fatalf("after a new seed: %q %v", tok.Reveal(), err)
	}
	// The old seed, still in another worker's file, does not undo it.
	if tok, err := a.Token(t.Context(), sub); err != nil || tok.Reveal() != "sk-ant-oat01-access-1" {
		t.Errorf("old seed: %q %v", tok.Reveal(), err)
	}
}

// TestOAuthMisconfigured: a 4xx that is not invalid_grant (here a
// token URL the server does not serve) fails the call, naming the
// settings to check, and does not write the refresh token off: the same
// seed works once the URL is right.
func TestOAuthMisconfigured(t *testing.T) {
	t.Parallel()
	f := newOAuthFleet(t, "sk-ant-ort01-seed")
	wrong, err := anthropic.NewOAuth(anthropic.OAuthConfig{Store: f.store(), TokenURL: f.ts.URL + "/oauth/tokn", ClientID: f.ts.clientID, Owner: "worker-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wrong.Close)
	_, err = wrong.Token(t.Context(), sub)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Reason != provider.ReasonAuthPermanent || !strings.Contains(pe.Message, "answered 404 Not Found — check ANTHROPIC_OAUTH_TOKEN_URL") ||
		!strings.Contains(pe.Message, `auth profile "anthropic:sub"`) {
		t.Fatalf("err %v", err)
	}
	if tok, err := f.worker("worker-b").Token(t.Context(), sub); err != nil || tok.Reveal() != "sk-ant-oat01-access-1" {
		t.Errorf("right URL: %q %v", tok.Reveal(), err)
	}
}

// TestOAuthCutOff: a worker stopped after the endpoint rotated the
// tokens but before it stored them (its refresh cancelled) leaves the
// record saying so; the next worker's refresh, refused, says whose
// refresh used the token up and what to do. A crashed worker's claim,
// left in the record, reads the same once it has expired.
func TestOAuthCutOff(t *testing.T) {
	t.Parallel()
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		f := newOAuthFleet(t, "sk-ant-ort01-seed")
		f.ts.hold = make(chan struct{})
		t.Cleanup(func() { close(f.ts.hold) })
		a, b := f.worker("worker-a"), f.worker("worker-b")
		errc := make(chan error, 1)
		go func() {
			_, err := a.Token(t.Context(), sub)
			errc <- err
		}()
		<-f.ts.arrived // rotated at the endpoint, the answer held back
		a.Close()      // the worker stops
		err := <-errc
		var pe *provider.Error
		if !errors.As(err, &pe) || !strings.Contains(pe.Message, "refresh cut off before an answer") {
			t.Fatalf("stopped worker: %v", err)
		}
		_, err = b.Token(t.Context(), sub)
		if err == nil || !strings.Contains(err.Error(), "invalid_grant") || !strings.Contains(err.Error(), "log in again") ||
			!strings.Contains(err.Error(), "a refresh by worker-a at ") || !strings.Contains(err.Error(), "was cut off before it stored its result") {
			t.Errorf("next worker: %v", err)
		}
	})
	t.Run("crashed", func(t *testing.T) {
		t.Parallel()
		f := newOAuthFleet(t, "sk-ant-ort01-rotated-by-the-crashed-worker")
		s := f.store()
		// What a worker that crashed mid-refresh leaves: its expired claim.
		rec := fmt.Sprintf(`{"refresh":"sk-ant-ort01-seed","claim":{"by":"worker-x","at":%d,"until":%d}}`,
			time.Now().Add(-time.Hour).UnixMilli(), time.Now().Add(-time.Minute).UnixMilli())
		if _, ok, err := s.SwapOAuth(t.Context(), sub.ID, []byte(rec), 0); err != nil || !ok {
			t.Fatal(ok, err)
		}
		held := sub
		held.Refresh = "" // the fleet's tokens only
		_, err := f.worker("worker-b").Token(t.Context(), held)
		if err == nil || !strings.Contains(err.Error(), "invalid_grant") || !strings.Contains(err.Error(), "a refresh by worker-x at ") {
			t.Errorf("err %v", err)
		}
	})
}

// TestOAuthUnreadableReply: a 200 from the token endpoint whose body is
// not the grant's JSON (here cut short mid-token) is reported as a reply
// that could not be read, not as one that never came, and quotes none of
// it; the refresh is recorded as cut, since the endpoint has likely
// rotated the refresh token.
func TestOAuthUnreadableReply(t *testing.T) {
	t.Parallel()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"sk-ant-oat01-leaked","refresh_token":"sk-ant-ort01-lea`))
	}))
	t.Cleanup(bad.Close)
	f := newOAuthFleet(t, "sk-ant-ort01-seed")
	o, err := anthropic.NewOAuth(anthropic.OAuthConfig{Store: f.store(), TokenURL: bad.URL, ClientID: f.ts.clientID, Owner: "worker-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	_, err = o.Token(t.Context(), sub)
	var pe *provider.Error
	if !errors.As(err, &pe) || !strings.Contains(pe.Message, `auth profile "anthropic:sub": the token endpoint answered 200 OK but its reply could not be read`) {
		t.Fatalf("err %v", err)
	}
	if strings.Contains(pe.Message, "cut off before an answer") || strings.Contains(fmt.Sprint(err), "sk-ant-") {
		t.Errorf("message %q", pe.Message)
	}
	// The next worker, at the real endpoint, which no longer takes the
	// seed, is told whose refresh may have used it up.
	f.ts.mu.Lock()
	f.ts.refresh = "sk-ant-ort01-rotated"
	f.ts.mu.Unlock()
	held := sub
	held.Refresh = ""
	if _, err := f.worker("worker-b").Token(t.Context(), held); err == nil || !strings.Contains(err.Error(), "a refresh by worker-a at ") {
		t.Errorf("next worker: %v", err)
	}
}

// TestOAuthRejected: an access token the API refuses before its expiry
// is renewed once for the fleet: the worker told of the 401 refreshes,
// another worker told of the same refused token takes the new one, and
// the Messages API takes it.
func TestOAuthRejected(t *testing.T) {
	t.Parallel()
	f := newOAuthFleet(t, "sk-ant-ort01-seed")
	a, b := f.worker("worker-a"), f.worker("worker-b")
	tok, err := a.Token(t.Context(), sub)
	if err != nil {
		t.Fatal(err)
	}
	if tb, err := b.Token(t.Context(), sub); err != nil || tb != tok {
		t.Fatalf("b: %q %v", tb.Reveal(), err)
	}
	f.ts.revoke()
	_, err = f.call(tok)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Status != http.StatusUnauthorized {
		t.Fatalf("revoked token: %v", err)
	}
	a.Rejected(sub, tok)
	b.Rejected(sub, tok)
	ta, err := a.Token(t.Context(), sub)
	if err != nil || ta.Reveal() != "sk-ant-oat01-access-2" {
		t.Fatalf("a after 401: %q %v", ta.Reveal(), err)
	}
	tb, err := b.Token(t.Context(), sub)
	if err != nil || tb != ta {
		t.Fatalf("b after 401: %q %v", tb.Reveal(), err)
	}
	if _, err := f.call(ta); err != nil {
		t.Fatal(err)
	}
	if n := f.ts.count(); n != 2 {
		t.Errorf("%d token requests, want 2 (the seed's, the 401's)", n)
	}
}

// TestOAuthRefreshAhead: a token within RefreshBefore of its expiry is
// still handed out at once while one refresh runs in the background, off
// the calls' path; the calls then get the new token.
func TestOAuthRefreshAhead(t *testing.T) {
	t.Parallel()
	f := newOAuthFleet(t, "sk-ant-ort01-seed")
	f.ts.hold = make(chan struct{})
	a := f.worker("worker-a")
	seeded := sub
	seeded.Access, seeded.Expires = "sk-ant-oat01-seeded", time.Now().Add(time.Minute) // inside the 5-minute window
	for range 3 {
		// The refresh is held at the endpoint: these return regardless.
		if tok, err := a.Token(t.Context(), seeded); err != nil || tok.Reveal() != "sk-ant-oat01-seeded" {
			t.Fatalf("while refreshing: %q %v", tok.Reveal(), err)
		}
	}
	if rt := <-f.ts.arrived; rt != "sk-ant-ort01-seed" {
		t.Fatalf("refreshed with %q", rt)
	}
	close(f.ts.hold)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		tok, err := a.Token(ctx, seeded)
		if err != nil {
			t.Fatal(err)
		}
		if tok.Reveal() == "sk-ant-oat01-access-1" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the background refresh's token never came")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if n := f.ts.count(); n != 1 {
		t.Errorf("%d token requests, want 1", n)
	}
}
