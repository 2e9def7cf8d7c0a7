package failover

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateRoom is what a provider's rate-limit headers say its key has left.
type RateRoom struct {
	// Requests and Tokens are the requests and tokens left; -1 when the
	// headers do not say.
	Requests, Tokens int64
	// Reset is how long until the tightest of them is whole again (0 when
	// the headers do not say).
	Reset time.Duration
}

// maxHeaderValue bounds a rate-limit header value read.
const maxHeaderValue = 64

// RateHeaders reads a response's rate-limit headers (header returns a
// header's value, as http.Header.Get): OpenAI's
// x-ratelimit-remaining-requests and -tokens with x-ratelimit-reset-requests
// and -tokens ("1s", "6m0s", "20ms"); Anthropic's
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-remaining
// with their -reset times (RFC 3339; the tightest token count is taken);
// and, on a 429, Retry-After (nothing left until then). ok is false when
// the response says nothing of its limits.
func RateHeaders(status int, header func(name string) string, now time.Time) (r RateRoom, ok bool) {
	r = RateRoom{Requests: -1, Tokens: -1}
	count := func(name string) int64 {
		v := header(name)
		if v == "" || len(v) > maxHeaderValue {
			return -1
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return -1
		}
		return n
	}
	tighter := func(cur, n int64) int64 {
		if n >= 0 && (cur < 0 || n < cur) {
			return n
		}
		return cur
	}
	reset := func(name string) {
		v := strings.TrimSpace(header(name))
		if v == "" || len(v) > maxHeaderValue {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			t, terr := time.Parse(time.RFC3339, v)
			if terr != nil {
				return
			}
			d = t.Sub(now)
		}
		if d > 0 {
			r.Reset = max(r.Reset, d)
		}
	}
	r.Requests = tighter(r.Requests, count("X-Ratelimit-Remaining-Requests"))
	r.Tokens = tighter(r.Tokens, count("X-Ratelimit-Remaining-Tokens"))
	reset("X-Ratelimit-Reset-Requests")
	reset("X-Ratelimit-Reset-Tokens")
	r.Requests = tighter(r.Requests, count("Anthropic-Ratelimit-Requests-Remaining"))
	reset("Anthropic-Ratelimit-Requests-Reset")
	for _, k := range []string{"Tokens", "Input-Tokens", "Output-Tokens"} {
		r.Tokens = tighter(r.Tokens, count("Anthropic-Ratelimit-"+k+"-Remaining"))
		reset("Anthropic-Ratelimit-" + k + "-Reset")
	}
	if status == http.StatusTooManyRequests {
		h := http.Header{}
		for _, k := range []string{"Retry-After", "Retry-After-Ms"} {
			if v := header(k); v != "" && len(v) <= maxHeaderValue {
				h.Set(k, v)
			}
		}
		if d := RetryAfter(h, nil, "", now); d > 0 {
			r.Requests, r.Tokens, r.Reset = 0, 0, max(r.Reset, d)
		}
	}
	return r, r.Requests >= 0 || r.Tokens >= 0
}
