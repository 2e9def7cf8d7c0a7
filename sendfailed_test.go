package lanefleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSendFailed pins the errors of a publish that retrying does not
// mend: each kind keeps its sentinel and says what a caller needs.
func TestSendFailed(t *testing.T) {
	t.Parallel()
	c := &Client{}
	refused := func(what string) error { return &pubAckError{jetstream.APIError{Description: what}} }
	for _, tc := range []struct {
		name string
		err  error
		is   error
		says string
	}{
		{"maybe stored", &sentError{errors.New("inbox refused")}, ErrUnacknowledged, "publisher send --id m1"},
		{"permission", fmt.Errorf("publish: %w", ErrPermission), ErrPermission, `(send to session "s")`},
		{"too large by the client", nats.ErrMaxPayload, ErrTooLarge, "is 123 bytes"},
		{"too large by the stream", refused("message size exceeds maximum allowed"), ErrTooLarge, "is 123 bytes"},
		{"anything else", errors.New("boom"), nil, `lanefleet: send to "s": boom`},
	} {
		err := c.sendFailed(context.Background(), tc.err, "s", "m1", 123)
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: %v is not %v", tc.name, err, tc.is)
		}
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v does not say %q", tc.name, err, tc.says)
		}
	}
}
