package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/lanefleet/lanefleet/provider"
)

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	pe := func(r provider.Reason, status int, msg string) error {
		return &provider.Error{Reason: r, Status: status, Message: msg}
	}
	tests := []struct {
		name string
		err  error
		text string
		want bool
	}{
		// Classified errors: the class decides.
		{"overloaded 529", pe(provider.ReasonOverloaded, 529, "Overloaded"), "Overloaded", true},
		{"rate limit 429", pe(provider.ReasonRateLimit, 429, "Rate limit reached"), "Rate limit reached", true},
		{"server error 500", pe(provider.ReasonTimeout, 500, "Internal server error"), "Internal server error", true},
		{"gateway timeout 504", pe(provider.ReasonTimeout, 504, "Gateway Timeout"), "Gateway Timeout", true},
		{"quota exhausted with 429 is billing", pe(provider.ReasonBilling, 429, "You exceeded your current quota"), "429 You exceeded your current quota", false},
		{"bad request", pe(provider.ReasonFormat, 400, "invalid request"), "invalid request", false},
		{"bad key", pe(provider.ReasonAuth, 401, "invalid x-api-key"), "invalid x-api-key", false},
		{"unknown model", pe(provider.ReasonModelNotFound, 404, "model not found"), "model not found", false},
		{"context overflow", pe(provider.ReasonContextOverflow, 400, "prompt is too long: 204290 tokens > 200000 maximum"), "prompt is too long: 204290 tokens > 200000 maximum", false},
		{"image too large", pe(provider.ReasonImageSize, 400, "image exceeds 5 MB maximum"), "image exceeds 5 MB maximum", false},
		{"an unclassified 500: its status", pe(provider.ReasonUnknown, 500, "boom"), "boom", true},
		{"an unclassified 418", pe(provider.ReasonUnknown, 418, "teapot"), "teapot", false},
		// Transport failures.
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), "read: connection reset by peer", true},
		{"truncated stream", fmt.Errorf("stream: %w", io.ErrUnexpectedEOF), "stream: unexpected EOF", true},
		{"cancelled", context.Canceled, "context canceled", false},
		{"own deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), "call: context deadline exceeded", false},
		// Unclassified: pi's wording.
		{"pi: other side closed", errors.New("other side closed"), "other side closed", true},
		{"pi: fetch failed", errors.New("TypeError: fetch failed"), "TypeError: fetch failed", true},
		{"pi: upstream connect error", errors.New("upstream connect error or disconnect/reset before headers"), "upstream connect error or disconnect/reset before headers", true},
		{"pi: a bare 502 in the text", errors.New("bad gateway 502 from proxy"), "bad gateway 502 from proxy", true},
		{"nothing known", errors.New("the model refused"), "the model refused", false},
		// Text only (no error value).
		{"text: overloaded", nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, true},
		{"text: context overflow with 429 inside", nil, "prompt is too long: 214290 tokens > 200000 maximum", false},
		{"text: empty", nil, "", false},
	}
	for _, tt := range tests {
		if got := IsRetryable(tt.err, tt.text); got != tt.want {
			t.Errorf("%s: IsRetryable = %v, want %v", tt.name, got, tt.want)
		}
	}
}
