package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestFullInboundStoreRefusesAndLosesNothing: with the fleet's inbound
// stream at its byte limit, a sender's next message is refused with a
// clear error while every message accepted before is kept; once the
// workers run, each accepted message is answered exactly once, in order,
// and the freed space takes new messages again.
func TestFullInboundStoreRefusesAndLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	// A member that prepared the streams but runs no turns yet: the
	// inbound stream only fills.
	m, err := fleet.Start(t.Context(), fleet.Config{NATSURL: srv.URL, WorkerID: "w1", Scripted: true, NoRemoteTools: true, NoBuiltinTools: true,
		AckWait: 5 * time.Second, LeaseTTL: 5 * time.Second, Limits: fleet.Limits{Inbound: 16 << 10, LaneMessages: -1, LaneBytes: -1}, // the stream fills, not the lane
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	js := newJS(t, natstest.Connect(t, srv.URL))
	padding := strings.Repeat("x", 900)
	var accepted []string
	var refusal error
	for i := 0; refusal == nil; i++ {
		if i > 100 {
			t.Fatal("a 16 KiB inbound stream took 100 messages of 1 KiB")
		}
		text := fmt.Sprintf("message %02d %s", i, padding)
		data, ct, _ := events.EncodeInbound(&events.Inbound{Text: text}, false)
		msg := nats.NewMsg(events.InboundPrefix + "full")
		msg.Data = data
		msg.Header.Set(events.HeaderContentType, ct)
		if _, refusal = js.PublishMsg(t.Context(), msg); refusal == nil {
			accepted = append(accepted, text)
		}
	}
	var apiErr *jetstream.APIError
	if !errors.As(refusal, &apiErr) || !strings.Contains(apiErr.Description, "maximum bytes exceeded") {
		t.Fatalf("the refusal: %v", refusal)
	}
	if len(accepted) < 5 {
		t.Fatalf("only %d messages fit", len(accepted))
	}

	f := watchFinals(t, natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("member: %v", err)
		}
	}()
	f.waitFor(t, len(accepted), 3*time.Minute)
	waitDrained(t, js, 3*time.Minute)
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	checkTranscripts(t, c, map[string][]string{"full": accepted})
	f.mu.Lock()
	dups := f.dups
	f.mu.Unlock()
	if dups != 0 {
		t.Fatalf("%d duplicate finals", dups)
	}

	// Processed messages are deleted: there is room again.
	data, ct, _ := events.EncodeInbound(&events.Inbound{Text: "after"}, false)
	msg := nats.NewMsg(events.InboundPrefix + "full")
	msg.Data = data
	msg.Header.Set(events.HeaderContentType, ct)
	if _, err := js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatalf("publish after the drain: %v", err)
	}
}
