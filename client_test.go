package lanefleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes"
)

// TestEventsSkipAZombiesLateEvents: after a restart, events of the older
// attempt (a worker that lost the lane and still publishes) are not yielded.
func TestEventsSkipAZombiesLateEvents(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	subj, _ := events.EventSubject("z", "7")
	seq := uint64(0)
	pub := func(attempt int, stream, phase, delta string) {
		seq++
		ev := &events.Event{RunID: "7", SessionKey: "z", Seq: seq, Attempt: attempt, Stream: stream, TS: 1,
			Data: events.EventData{Phase: phase, Delta: delta}}
		if stream == events.StreamFinal {
			ev.Data.Result = &events.Result{}
		}
		data, ct, err := events.EncodeEvent(ev, false)
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{events.HeaderContentType: []string{ct}}}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	pub(1, events.StreamLifecycle, events.PhaseStart, "")
	pub(1, events.StreamAssistant, "", "old ")
	pub(2, events.StreamLifecycle, events.PhaseAborted, "")
	pub(2, events.StreamLifecycle, events.PhaseRestart, "")
	pub(1, events.StreamAssistant, "", "zombie ") // the old worker, late
	pub(2, events.StreamAssistant, "", "new")
	pub(2, events.StreamFinal, "", "")

	c, _ := New(nc)
	var got []string
	for ev, err := range c.Run("z", "7").Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s%s%s", ev.Attempt, ev.Stream, ev.Data.Phase, ev.Data.Delta))
	}
	want := "1:lifecyclestart 1:assistantold  2:lifecycleaborted 2:lifecyclerestart 2:assistantnew 2:final"
	if strings.Join(got, " ") != want {
		t.Fatalf("events\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}
