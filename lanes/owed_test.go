package lanes

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
)

// TestDrainPublishesWhatARecordItDidNotCheckOwes: an owner whose record write got no
// answer (stored all the same) and that takes the lane again (it found
// the message still there when it let go) publishes that record's final
// events before anything else, although it checked an older record
// before: it checks the newest record whenever that is another one.
func TestDrainPublishesWhatARecordItDidNotCheckOwes(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 10*time.Second, 10*time.Second)
	ctx := t.Context()
	const key = "unanswered"
	tok, _ := events.KeyToken(key)
	subj, _ := events.InboundSubject(key)
	w, err := NewWorker(f.js, f.streams, f.lanes, &echoHandler{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := f.lanes.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	// The turn of inbound seq 7 committed: its record is stored with its
	// final event, which was never published (the owner never heard the
	// record was stored).
	final, _, err := events.EncodeEvent(&events.Event{Stream: events.StreamFinal,
		Data: events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "seven"}}}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.PutRecord(ctx, kvstore.Record{InboundSeq: 7, RunID: "7", Final: final}); err != nil {
		t.Fatal(err)
	}
	// The owner had checked the record before (seq 5).
	o := w.newOwner(tok, key, subj, ownerLease{Lease: lease}, 0)
	o.lane.checked = 5
	if lost := o.drain(ctx); lost {
		t.Fatal("the drain found its lease lost")
	}
	ev := f.waitFinal(t, key, 7)
	if r := ev.Data.Result; r == nil || len(r.Payloads) != 1 || r.Payloads[0].Text != "seven" {
		t.Fatalf("run 7's final %+v, want the record's", ev.Data)
	}
	if o.lane.checked != 7 {
		t.Fatalf("checked %d after the drain, want 7", o.lane.checked)
	}
}
