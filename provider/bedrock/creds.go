package bedrock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Credentials from the chain are refreshed off the request path: a call
// that finds them within AheadWindow of expiring signs with them and
// starts one refresh in the background; only a call that finds none yet,
// or finds them within lastMinute of expiring (a refresh that failed or
// has not finished), waits for the chain.
const (
	// AheadWindow is how long before they expire credentials are
	// refreshed in the background.
	AheadWindow = 2 * RefreshWindow
	// lastMinute is how close to expiring credentials are still used
	// while a refresh runs.
	lastMinute = time.Minute
	// retryAhead spaces background refreshes; each refresh that brings
	// no newer credentials (a provider that rotates late) or fails
	// doubles the space, up to maxRetryAhead, so unchanged credentials
	// are fetched a handful of times in the window, not every 30 s.
	retryAhead    = 30 * time.Second
	maxRetryAhead = 4 * time.Minute
)

// aheadCredentials serves the chain's credentials from memory and
// refreshes them ahead of their expiry.
type aheadCredentials struct {
	src aws.CredentialsProvider // the chain (the SDK's credential cache)

	cur     atomic.Pointer[aws.Credentials]
	running atomic.Bool
	last    atomic.Int64 // unix ns of the last background refresh's start
	gap     atomic.Int64 // ns from last to the next allowed refresh; 0 is retryAhead
	wg      sync.WaitGroup
}

// aheadOf wraps the chain's provider; nil stays nil.
func aheadOf(src aws.CredentialsProvider) aws.CredentialsProvider {
	if src == nil {
		return nil
	}
	return &aheadCredentials{src: src}
}

// Retrieve returns the current credentials, starting a background
// refresh when they near expiry; it waits for the chain only when there
// are none yet or they are about to expire.
func (a *aheadCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	now := time.Now()
	if c := a.cur.Load(); c != nil {
		if !c.CanExpire {
			return *c, nil
		}
		left := c.Expires.Sub(now)
		if left > AheadWindow {
			return *c, nil
		}
		if left > lastMinute {
			a.refreshAhead(now)
			return *c, nil
		}
	}
	c, err := a.src.Retrieve(ctx)
	if err != nil {
		return c, err
	}
	a.cur.Store(&c)
	return c, nil
}

// refreshAhead starts a background refresh unless one runs or one
// started within retryAhead.
func (a *aheadCredentials) refreshAhead(now time.Time) {
	if now.UnixNano()-a.last.Load() < a.retryGap() || !a.running.CompareAndSwap(false, true) {
		return
	}
	a.last.Store(now.UnixNano())
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer a.running.Store(false)
		if inv, ok := a.src.(interface{ Invalidate() }); ok {
			// The SDK's cache would hand back the same credentials until
			// its own (shorter) window.
			inv.Invalidate()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := a.src.Retrieve(ctx)
		if err != nil {
			a.gap.Store(min(2*a.retryGap(), int64(maxRetryAhead)))
			return
		}
		if old := a.cur.Load(); old != nil && old.AccessKeyID == c.AccessKeyID && old.Expires.Equal(c.Expires) {
			a.gap.Store(min(2*a.retryGap(), int64(maxRetryAhead)))
		} else {
			a.gap.Store(0)
		}
		a.cur.Store(&c)
	}()
}

// retryGap is the space between background refreshes, in ns.
func (a *aheadCredentials) retryGap() int64 {
	if g := a.gap.Load(); g > 0 {
		return g
	}
	return int64(retryAhead)
}

// IsCredentialsProvider reports whether the chain's provider is of
// target's type (aws.IsCredentialsProvider sees through the wrapper).
func (a *aheadCredentials) IsCredentialsProvider(target aws.CredentialsProvider) bool {
	return aws.IsCredentialsProvider(a.src, target)
}
