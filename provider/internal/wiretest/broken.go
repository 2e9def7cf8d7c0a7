package wiretest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/refused"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// StreamFunc makes one call of the adapter under test against the server at
// url, with the adapter's IdleTimeout set to idle (0 = its default).
type StreamFunc func(ctx context.Context, url string, idle time.Duration, emit func(provider.Event)) (message.Message, error)

// BrokenIdle is the idle timeout of Broken's stall subtest: long enough
// that a busy machine delivers the stream's first bytes within it (the
// partial text is checked), short enough to keep the test quick.
const BrokenIdle = 2 * time.Second

// Broken runs the subtests every adapter must pass when the network breaks
// after prefix, a stream body whose text deltas add up to partial: a reset
// connection ends as a timeout, a stalled stream as a timeout that says it
// stalled (within seconds, never a hang), and a caller cancelling once all
// of partial has arrived as aborted; each keeps the partial text. A refused
// connection says "connection refused" (a transient failure, like a
// reset), not that something timed out or stalled.
func Broken(t *testing.T, prefix []byte, partial string, call StreamFunc) {
	t.Helper()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		msg, err := call(t.Context(), "http://"+refused.Addr(t), 0, nil)
		text := strings.ToLower(msg.ErrorMessage)
		if provider.ReasonOf(err) != provider.ReasonTimeout || !strings.Contains(text, "connection refused") ||
			strings.Contains(text, "timeout") || strings.Contains(text, "timed out") || strings.Contains(text, "stalled") {
			t.Errorf("%v %q", err, msg.ErrorMessage)
		}
	})
	t.Run("reset", func(t *testing.T) {
		t.Parallel()
		srv := Reset(t, prefix)
		msg, err := call(t.Context(), srv.URL, 0, nil)
		if provider.ReasonOf(err) != provider.ReasonTimeout || msg.Content.Text() != partial {
			t.Errorf("%v %+v", err, msg)
		}
	})
	t.Run("abort", func(t *testing.T) {
		t.Parallel()
		srv := Stall(t, prefix)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var got strings.Builder
		msg, err := call(ctx, srv.URL, 0, func(e provider.Event) {
			if e.Type == provider.EventTextDelta {
				got.WriteString(e.Delta)
				if got.String() == partial {
					cancel()
				}
			}
		})
		if provider.ReasonOf(err) != provider.ReasonAborted || msg.StopReason != message.StopAborted || msg.Content.Text() != partial {
			t.Errorf("%v %+v", err, msg)
		}
	})
	t.Run("stall", func(t *testing.T) {
		t.Parallel()
		srv := Stall(t, prefix)
		// A stall that is never detected hangs until the test's deadline.
		msg, err := call(t.Context(), srv.URL, BrokenIdle, nil)
		if provider.ReasonOf(err) != provider.ReasonTimeout || msg.Content.Text() != partial || !strings.Contains(err.Error(), "stalled") {
			t.Errorf("%v %+v", err, msg)
		}
	})
}
