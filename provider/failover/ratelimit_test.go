package failover

import (
	"net/http"
	"testing"
	"time"
)

func TestRateHeaders(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		status int
		h      map[string]string
		want   RateRoom
		ok     bool
	}{
		{"none", 200, nil, RateRoom{Requests: -1, Tokens: -1}, false},
		{"openai", 200, map[string]string{"x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "149984",
			"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, RateRoom{59, 149984, 6 * time.Minute}, true},
		{"anthropic: the tightest token count", 200, map[string]string{"anthropic-ratelimit-requests-remaining": "49",
			"anthropic-ratelimit-requests-reset": "2026-11-29T10:00:30Z", "anthropic-ratelimit-tokens-remaining": "9000",
			"anthropic-ratelimit-input-tokens-remaining": "4000", "anthropic-ratelimit-output-tokens-remaining": "8000"}, RateRoom{49, 4000, 30 * time.Second}, true},
		{"429 with retry-after: nothing left until then", 429, map[string]string{"retry-after": "12"}, RateRoom{0, 0, 12 * time.Second}, true},
		{"429 without a delay says nothing", 429, nil, RateRoom{Requests: -1, Tokens: -1}, false},
		{"hostile values are ignored", 200, map[string]string{"x-ratelimit-remaining-requests": "-5", "x-ratelimit-remaining-tokens": "99999999999999999999999",
			"x-ratelimit-reset-requests": "forever"}, RateRoom{Requests: -1, Tokens: -1}, false},
		{"a reset in the past is none", 200, map[string]string{"anthropic-ratelimit-requests-remaining": "3",
			"anthropic-ratelimit-requests-reset": "2026-11-29T09:00:00Z"}, RateRoom{3, -1, 0}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.h {
				h.Set(k, v)
			}
			got, ok := RateHeaders(tt.status, h.Get, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("RateHeaders = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
