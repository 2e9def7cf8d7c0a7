package lanes

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
)

// TestUnstoredCutReleasesPromptly: an interrupt the owner's watch sees but
// the stream never stores (a duplicate Nats-Msg-Id, a failed expected
// sequence) cuts the running turn, which then waits only cutStoreWait for
// it on the lane: the turn ends as interrupted with its progress kept, and
// the lane goes on.
func TestUnstoredCutReleasesPromptly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		refuse func(m *nats.Msg) // makes the stream refuse the interrupt
	}{
		{"duplicate", func(m *nats.Msg) { m.Header.Set(jetstream.MsgIDHeader, "long-once") }},
		{"expected sequence", func(m *nats.Msg) { m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "999999") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 10*time.Second, 10*time.Second)
			started, cutSeen := make(chan struct{}), make(chan struct{})
			f.startWorker(t, cutHalfway(started, cutSeen), Config{})
			key := "unstored"
			subj, _ := events.InboundSubject(key)
			publish := func(in *events.Inbound, msgID string) (*jetstream.PubAck, error) {
				data, ct, _ := events.EncodeInbound(in, false)
				m := nats.NewMsg(subj)
				m.Data = data
				m.Header.Set(events.HeaderContentType, ct)
				if msgID != "" {
					m.Header.Set(jetstream.MsgIDHeader, msgID)
				}
				if in.Mode == "interrupt" {
					tc.refuse(m)
				}
				return f.js.PublishMsg(t.Context(), m)
			}
			ack, err := publish(&events.Inbound{Text: "long"}, "long-once")
			if err != nil {
				t.Fatal(err)
			}
			long := ack.Sequence
			waitClosed(t, "the long turn", started)
			if ack, err := publish(&events.Inbound{Text: "next", Mode: "interrupt"}, ""); err == nil && !ack.Duplicate {
				t.Fatalf("the stream stored the interrupt at %d", ack.Sequence)
			}
			waitClosed(t, "the unstored interrupt cutting the turn", cutSeen)
			if e := f.waitFinal(t, key, long).Data.Result.Meta.Error; e == nil || e.Kind != events.KindInterrupted {
				t.Fatalf("cut run's error %+v", e)
			}
			ack, err = publish(&events.Inbound{Text: "after"}, "")
			if err != nil {
				t.Fatal(err)
			}
			f.waitFinal(t, key, ack.Sequence)
			want := []string{"long", "half done", "after", "ok after"}
			if texts := f.transcriptTexts(t, key); !slices.Equal(texts, want) {
				t.Fatalf("transcript %q, want %q", texts, want)
			}
		})
	}
}
