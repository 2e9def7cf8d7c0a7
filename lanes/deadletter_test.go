package lanes

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
)

// TestDeadLetterDropsJetStreamHeaders: an invalid message whose sender set
// JetStream control headers (meant for the inbound stream) is still
// dead-lettered: the dead letter keeps the sender's own headers and none
// of the Nats-* ones, which the dead-letter stream would otherwise apply
// and refuse the write for.
func TestDeadLetterDropsJetStreamHeaders(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 5*time.Second, 5*time.Second)
	f.startWorker(t, &echoHandler{}, Config{})

	subj, _ := events.InboundSubject("hostile")
	m := nats.NewMsg(subj)
	m.Data = []byte("{not json")
	m.Header.Set(events.HeaderContentType, events.ContentJSON)
	m.Header.Set("X-Trace", "abc")
	// Both hold for the inbound stream; the first fails on the dead-letter one.
	m.Header.Set(jetstream.ExpectedStreamHeader, events.InboundStream)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	ack, err := f.js.PublishMsg(t.Context(), m, jetstream.WithMsgID("hostile-1"))
	if err != nil {
		t.Fatal(err)
	}
	if e := f.waitFinal(t, "hostile", ack.Sequence).Data.Result.Meta.Error; e == nil || e.Kind != "invalid_input" {
		t.Fatalf("final error = %+v, want invalid_input", e)
	}
	info, err := f.streams.Dead.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("dead letters = %d, want 1", info.State.Msgs)
	}
	dl, err := f.streams.Dead.GetMsg(t.Context(), info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	if dl.Header.Get("X-Trace") != "abc" || dl.Header.Get(events.HeaderSubject) != subj || string(dl.Data) != "{not json" {
		t.Fatalf("dead letter = %v %q", dl.Header, dl.Data)
	}
	for k := range dl.Header {
		if len(k) >= 5 && k[:5] == "Nats-" {
			t.Errorf("dead letter kept header %s", k)
		}
	}
}
