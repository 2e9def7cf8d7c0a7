package vertex_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

func (b *bundle) hello(t *testing.T) call {
	t.Helper()
	b.setAnswer(func(w http.ResponseWriter, c call) { sseReply(w, geminiText) })
	if _, _, err := b.stream(t, &provider.Request{Model: model(b.vs.URL, "google-vertex", "gemini-2.5-flash"), Messages: []message.Message{message.User("hi", 1)}}); err != nil {
		t.Fatal(err)
	}
	return b.lastCall(t)
}

// fetched waits for the token server to issue its next token.
func (ts *tokenServer) waitFetch(t *testing.T) {
	t.Helper()
	select {
	case <-ts.fetched:
	case <-time.After(time.Minute):
		t.Fatal("no token fetched")
	}
}

// TestTokenCached: a token that lives an hour is fetched once and sent
// by every later call.
func TestTokenCached(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{lifetime: time.Hour})
	for range 3 {
		b.hello(t)
	}
	if n := b.ts.fetches(); n != 1 {
		t.Errorf("%d token fetches for 3 calls, want 1", n)
	}
}

// TestTokenSharedByConcurrentCalls: calls that start together with no
// token held wait on one fetch.
func TestTokenSharedByConcurrentCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.setAnswer(func(w http.ResponseWriter, c call) { sseReply(w, geminiText) })
	gate := make(chan struct{})
	b.ts.mu.Lock()
	b.ts.gate = gate
	b.ts.mu.Unlock()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := b.adapter.Stream(t.Context(), &provider.Request{Model: model(b.vs.URL, "google-vertex", "gemini-2.5-flash"),
				Messages: []message.Message{message.User("hi", 1)}, APIKey: provider.Secret(b.key)}, nil)
			errs <- err
		})
	}
	close(gate) // the one fetch answers once every call may have asked
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := b.ts.fetches(); got != 1 {
		t.Errorf("%d token fetches for %d concurrent calls, want 1", got, n)
	}
}

// TestTokenRefreshedBeforeExpiry: a token within the refresh window (it
// lives 2 minutes, the window is 5) is still sent while a new one is
// fetched in the background: a call goes through while the token
// endpoint holds the refresh, and the calls after it send the new
// token. The old one had not expired.
func TestTokenRefreshedBeforeExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{lifetime: 2 * time.Minute})
	b.ts.next = time.Hour // the refreshed token is out of the window
	first := b.hello(t)   // waits: no token held
	b.ts.waitFetch(t)
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // before the servers close
	b.ts.mu.Lock()
	b.ts.gate = gate
	b.ts.mu.Unlock()
	// This call finds the token in the window: it starts the refresh,
	// which the endpoint holds, and goes on with the token it has.
	c := b.hello(t)
	if c.account != first.account {
		t.Fatalf("account %s", c.account)
	}
	tok1 := bearer(c)
	release()
	b.ts.waitFetch(t)
	if _, ok := b.ts.holds(tok1); !ok {
		t.Fatal("the old token expired before the refresh: nothing shown")
	}
	// The refresh's token replaces it; wait for the calls to send it.
	deadline := time.Now().Add(time.Minute)
	for bearer(b.hello(t)) == tok1 {
		if time.Now().After(deadline) {
			t.Fatal("the refreshed token was never sent")
		}
	}
	if got := b.ts.fetches(); got != 2 {
		t.Errorf("%d fetches, want 2", got)
	}
}

func bearer(c call) string { return strings.TrimPrefix(c.header.Get("Authorization"), "Bearer ") }
