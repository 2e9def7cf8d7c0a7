package lanes

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestStreamLimits: every stream gets a byte limit; the inbound stream,
// once full, refuses a new message with "maximum bytes exceeded" and keeps
// every message it accepted; an existing stream without limits (made by
// an older worker) gets them, DiscardNew, without losing a message. At R1
// the streams the owners read serve Direct Get (their leader is their only
// copy; TestZombieEventsFencedOnReplicatedStream checks R3 keeps it off).
func TestStreamLimits(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, srv.URL))

	// An older fleet's inbound stream: no byte limit, DiscardOld.
	old, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: events.InboundStream,
		Subjects: []string{events.InboundPrefix + "*"}, Discard: jetstream.DiscardOld})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(i int) error {
		m := nats.NewMsg(events.InboundPrefix + "full")
		m.Data = fmt.Appendf(nil, `{"text":"message %04d with some padding to fill the stream"}`, i)
		_, err := js.PublishMsg(t.Context(), m)
		return err
	}
	for i := range 10 {
		if err := publish(i); err != nil {
			t.Fatal(err)
		}
	}
	info, _ := old.Info(t.Context())
	limit := int64(info.State.Bytes) + 2048 // room for a few more only

	s, err := EnsureStreams(t.Context(), js, StreamConfig{InboundMaxBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		st      jetstream.Stream
		max     int64
		discard jetstream.DiscardPolicy
		direct  bool
	}{
		{s.Inbound, limit, jetstream.DiscardNew, true},
		{s.Events, DefaultEventMaxBytes, jetstream.DiscardOld, true},
		{s.Dead, DefaultDeadMaxBytes, jetstream.DiscardNew, false},
	} {
		info, err := c.st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.MaxBytes != c.max || info.Config.Discard != c.discard || info.Config.AllowDirect != c.direct {
			t.Errorf("%s: max bytes %d discard %v direct %v, want %d %v %v", info.Config.Name, info.Config.MaxBytes, info.Config.Discard, info.Config.AllowDirect,
				c.max, c.discard, c.direct)
		}
	}

	accepted := 10
	var refusal error
	for i := 10; i < 1000 && refusal == nil; i++ {
		if refusal = publish(i); refusal == nil {
			accepted++
		}
	}
	var apiErr *jetstream.APIError
	if !errors.As(refusal, &apiErr) || apiErr.Description != "maximum bytes exceeded" {
		t.Fatalf("publish to a full inbound stream: %v, want maximum bytes exceeded", refusal)
	}
	info, err = s.Inbound.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(accepted) || info.State.FirstSeq != 1 {
		t.Fatalf("inbound holds %d messages from seq %d, want all %d accepted from 1", info.State.Msgs, info.State.FirstSeq, accepted)
	}
}

// TestStreamLimitsDefaultsAndNone: 0 is each limit's default, -1 none.
func TestStreamLimitsDefaultsAndNone(t *testing.T) {
	t.Parallel()
	c := StreamConfig{EventMaxBytes: -1}.withDefaults()
	if c.InboundMaxBytes != DefaultInboundMaxBytes || c.DeadMaxBytes != DefaultDeadMaxBytes || c.EventMaxBytes != -1 {
		t.Fatalf("limits = %d %d %d", c.InboundMaxBytes, c.EventMaxBytes, c.DeadMaxBytes)
	}
}
