package gateway

import (
	"math"
	"sync"
	"time"
)

// limiter is one token's rate and concurrency limits on this gateway: a
// token bucket of Rate per minute holding Burst, and a count of requests
// in flight. Limits are per gateway process (the gateway keeps no shared
// state): n gateways behind a balancer allow n times the rate.
type limiter struct {
	perSec      float64 // refill, tokens per second (0: no rate limit)
	burst       float64
	concurrency int // 0: no limit

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	inFlight int
}

func newLimiter(e TokenEntry) *limiter {
	l := &limiter{perSec: float64(e.Rate) / 60, concurrency: e.Concurrency}
	burst := e.Burst
	if burst == 0 {
		burst = max(1, e.Rate/10)
	}
	l.burst, l.tokens = float64(burst), float64(burst)
	return l
}

// acquire takes one request: ok, or how long until one is allowed.
// A request taken must be released (release) when it ends.
func (l *limiter) acquire(now time.Time) (ok bool, retryAfter time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.concurrency > 0 && l.inFlight >= l.concurrency {
		return false, time.Second
	}
	if l.perSec > 0 {
		if !l.last.IsZero() {
			l.tokens = math.Min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.perSec)
		}
		l.last = now
		if l.tokens < 1 {
			return false, time.Duration((1 - l.tokens) / l.perSec * float64(time.Second))
		}
		l.tokens--
	}
	l.inFlight++
	return true, 0
}

// release ends a request acquire took.
func (l *limiter) release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.inFlight--
	l.mu.Unlock()
}
