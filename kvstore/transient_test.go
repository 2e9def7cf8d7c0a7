package kvstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestTransient: which store errors pass on their own (a lane retries them
// without counting an attempt) and which are refusals.
func TestTransient(t *testing.T) {
	t.Parallel()
	api := func(code jetstream.ErrorCode) error {
		return &jetstream.APIError{Code: 503, ErrorCode: code, Description: "x"}
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		// a stream without a leader: nobody answers the write
		{"no stream response", jetstream.ErrNoStreamResponse, true},
		{"no responders", nats.ErrNoResponders, true},
		// an answer lost in a leader change
		{"deadline", context.DeadlineExceeded, true},
		{"nats timeout", nats.ErrTimeout, true},
		{"reconnecting", nats.ErrConnectionReconnecting, true},
		{"cluster not available (10008)", api(jsClusterNotAvail), true},
		{"not the leader (10009)", api(jsClusterNotLeader), true},
		{"stream offline (10118)", api(jsStreamOffline), true},
		{"jetstream not up yet", jetstream.ErrJetStreamNotEnabled, true},
		// the layers the lanes wrap it in keep it
		{"wrapped", fmt.Errorf("kvstore: write a.tx.1 a: %w", jetstream.ErrNoStreamResponse), true},
		// refusals say something about the write
		{"wrong last sequence", api(jetstream.JSErrCodeStreamWrongLastSequence), false},
		{"message too large", jetstream.ErrStreamMessageExceedsMaximum, false},
		{"stream full (10077)", api(10077), false},
		{"stream not found", jetstream.ErrStreamNotFound, false},
		{"lease lost", ErrLeaseLost, false},
		{"cancelled", context.Canceled, false},
		{"other", errors.New("boom"), false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestTransientWriteToAStreamWithoutResponders: a write to a stream that
// cannot answer (here: none takes the subject) fails transient.
func TestTransientWriteToAStreamWithoutResponders(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := js.Publish(ctx, "nobody.stores.this", nil)
	if !Transient(err) {
		t.Fatalf("Transient(%v) = false", err)
	}
}
