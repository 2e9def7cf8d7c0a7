package fallback

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lanefleet/lanefleet/provider"
)

func TestProviderClassifier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want Classification
	}{
		// A classified provider error keeps its reason, status and message.
		{"provider error", fmt.Errorf("call: %w", &provider.Error{Reason: provider.ReasonRateLimit, Status: 429, Message: "slow down"}),
			Classification{Reason: provider.ReasonRateLimit, Status: 429, Message: "slow down"}},
		// Without a status the reason's status is used.
		{"status from reason", &provider.Error{Reason: provider.ReasonBilling, Message: "pay"},
			Classification{Reason: provider.ReasonBilling, Status: 402, Message: "pay"}},
		// Cancellation is a user abort.
		{"cancel", fmt.Errorf("stream: %w", context.Canceled), Classification{Abort: true}},
		{"aborted request", &provider.Error{Reason: provider.ReasonAborted, Message: "Request was aborted"}, Classification{Abort: true, Message: "Request was aborted"}},
		// An abort that says it timed out is a timeout, which falls back
		// (the reference's timeout-like AbortError).
		{"aborted by a timer", &provider.Error{Reason: provider.ReasonAborted, Message: "request timed out"},
			Classification{Reason: provider.ReasonTimeout, Status: 408, Message: "request timed out"}},
		// A deadline is a timeout, which falls back.
		{"deadline", context.DeadlineExceeded, Classification{Reason: provider.ReasonTimeout, Status: 408}},
		// An overflow is never a fallback matter.
		{"overflow text", errors.New("prompt is too long: 300000 tokens > 200000 maximum"), Classification{ContextOverflow: true}},
		{"overflow reason", &provider.Error{Reason: provider.ReasonContextOverflow}, Classification{ContextOverflow: true}},
		// Unrecognised text is not a failover error.
		{"unknown", errors.New("weird failure"), Classification{}},
		// Role ordering is not a failover reason.
		{"role ordering", &provider.Error{Reason: provider.ReasonRoleOrdering, Message: "roles must alternate"}, Classification{Message: "roles must alternate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ProviderClassifier.Classify(tt.err); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
