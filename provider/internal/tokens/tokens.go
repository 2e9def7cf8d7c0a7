// Package tokens hands out one OAuth credential's access tokens to
// concurrent model calls (Vertex AI's Google credentials, Azure's Entra ID
// client credentials, Anthropic's OAuth tokens held by the fleet): cached,
// shared, refreshed in the background before they expire, off every call's
// path.
package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/lanefleet/lanefleet/provider"
)

// Token lifetimes. Google's and Entra ID's access tokens live about an hour.
const (
	// RefreshBeforeDefault is how long before its expiry a token is
	// refreshed in the background while calls go on using it.
	RefreshBeforeDefault = 5 * time.Minute
	// expiryMargin is how long before its expiry a token is no longer
	// sent: a call waits for a new one instead.
	expiryMargin = 10 * time.Second
	// retryRefreshAfter spaces background refreshes that failed, so that
	// a token endpoint that is down is not asked once per call.
	retryRefreshAfter = 5 * time.Second
)

// errExpiredToken reports a token source that answered with a token
// that had already expired.
var errExpiredToken = errors.New("the token source gave an expired token")

// Cache hands out one credential's access tokens to concurrent calls.
// A call gets the token held while it is good for more than
// expiryMargin, without waiting; the first call within the refresh window
// (before) starts one refresh in the background, off every call's path,
// and the calls go on with the token held until the new one replaces it.
// Only when no good token is held do calls wait, all of them on the same
// one fetch. Fetches go through an oauth2.ReuseTokenSource, whose early
// expiry is the window, over the credential's own source.
type Cache struct {
	inner  oauth2.TokenSource // the credential's own source
	before time.Duration
	wg     *sync.WaitGroup // the owner's: it waits for the refreshes in flight

	mu      sync.Mutex
	src     oauth2.TokenSource // inner behind a reuse wrapper; replaced by Forget
	tok     *oauth2.Token
	asked   bool          // a refresh of tok was started
	retry   time.Time     // no background refresh before this (one failed)
	running chan struct{} // closed when the fetch in flight ends; nil when none
	err     error         // the last fetch's failure
}

// New returns the token cache of src, refreshing a token before (0 =
// RefreshBeforeDefault) ahead of its expiry; wg counts the refreshes in
// flight, for the owner to wait on when it closes. A src that is itself
// an oauth2.ReuseTokenSource (as oauth2/google's are) is wrapped in one
// whose early expiry is before, so a refresh reaches the credential's
// token endpoint instead of the wrapper's copy of the token.
func New(src oauth2.TokenSource, before time.Duration, wg *sync.WaitGroup) *Cache {
	if before <= 0 {
		before = RefreshBeforeDefault
	}
	return &Cache{inner: src, src: oauth2.ReuseTokenSourceWithExpiry(&oauth2.Token{}, src, before), before: before, wg: wg}
}

// Forget drops the token held when it is tok (one the API refused before
// its expiry), so that the next Token waits for a fetch from the
// credential's own source instead of handing it out again. A fetch in
// flight is not cut short: what it brings replaces tok.
func (t *Cache) Forget(tok string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tok == nil || t.tok.AccessToken != tok {
		return
	}
	t.tok = nil
	t.retry = time.Time{}
	t.src = oauth2.ReuseTokenSourceWithExpiry(&oauth2.Token{}, t.inner, t.before)
}

// good reports whether tok is good for more than d after now.
func good(tok *oauth2.Token, now time.Time, d time.Duration) bool {
	return tok != nil && tok.AccessToken != "" && (tok.Expiry.IsZero() || now.Add(d).Before(tok.Expiry))
}

// Token returns an access token good for at least expiryMargin. It waits
// only when none is held, until the fetch ends or ctx is done.
func (t *Cache) Token(ctx context.Context) (string, error) {
	t.mu.Lock()
	now := time.Now()
	if tok := t.tok; good(tok, now, expiryMargin) {
		if !good(tok, now, t.before) && !t.asked && !now.Before(t.retry) {
			t.asked = true
			t.fetchLocked()
		}
		t.mu.Unlock()
		return tok.AccessToken, nil
	}
	done := t.fetchLocked()
	t.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if good(t.tok, time.Now(), expiryMargin) {
		return t.tok.AccessToken, nil
	}
	if t.err != nil {
		return "", t.err
	}
	return "", errExpiredToken
}

// fetchLocked starts a fetch unless one is in flight, and returns the
// channel closed when it ends. The fetch's goroutine is counted in t.wg;
// it is bounded by the token client's timeout.
func (t *Cache) fetchLocked() <-chan struct{} {
	if t.running != nil {
		return t.running
	}
	done := make(chan struct{})
	t.running = done
	src := t.src
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		tok, err := src.Token()
		t.mu.Lock()
		if err == nil && tok != nil {
			t.tok, t.err = tok, nil
		} else {
			if err == nil {
				err = errExpiredToken
			}
			t.err, t.retry = err, time.Now().Add(retryRefreshAfter)
		}
		t.asked = false
		t.running = nil
		t.mu.Unlock()
		close(done)
	}()
	return done
}

// Error is the failure of adapter name to get a token, classified: the token endpoint's
// refusal of the credential (a 4xx other than 429) is auth_permanent, its
// 429 rate_limit, anything else (a 5xx, the network) timeout.
func Error(name string, err error) *provider.Error {
	var re *oauth2.RetrieveError
	reason := provider.ReasonTimeout
	status := 0
	switch {
	case errors.Is(err, context.Canceled):
		reason = provider.ReasonAborted
	case errors.As(err, &re) && re.Response != nil:
		status = re.Response.StatusCode
		switch {
		case status == http.StatusTooManyRequests:
			reason = provider.ReasonRateLimit
		case status >= 400 && status < 500:
			reason = provider.ReasonAuthPermanent
		}
	}
	return &provider.Error{Reason: reason, Status: status, Message: name + ": get an access token: " + scrub(err), Err: err}
}

// scrub keeps an error's text short: a token endpoint's error body is
// echoed in full by oauth2.RetrieveError.
func scrub(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		code, desc := re.ErrorCode, re.ErrorDescription
		if code == "" && len(re.Body) <= 4096 {
			// oauth2/jwt leaves the body unparsed.
			var body struct {
				Error            string `json:"error"`
				ErrorDescription string `json:"error_description"`
			}
			if json.Unmarshal(re.Body, &body) == nil {
				code, desc = body.Error, body.ErrorDescription
			}
		}
		s := code
		if desc != "" {
			s += ": " + desc
		}
		if s == "" && re.Response != nil {
			s = re.Response.Status
		}
		return "token endpoint: " + s
	}
	s := err.Error()
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}
