package lanefleet

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// TestQueueSettingsWireForm: settings survive the trip to their wire form
// and back; aliases in the wire form read as their modes and policies; the
// conversion to a queue.Resolve layer keeps every field.
func TestQueueSettingsWireForm(t *testing.T) {
	t.Parallel()
	zero := time.Duration(0)
	s := QueueSettings{Mode: "collect", Debounce: &zero, Cap: 3, Drop: "old"}
	q := s.Wire()
	if got := q.String(); got != "mode collect, debounce 0ms, cap 3, drop old" {
		t.Fatalf("Wire = %s", got)
	}
	back := QueueSettingsFromWire(q)
	if back.Mode != s.Mode || back.Debounce == nil || *back.Debounce != 0 || back.Cap != 3 || back.Drop != s.Drop {
		t.Fatalf("QueueSettingsFromWire = %+v", back)
	}
	if a := QueueSettingsFromWire(&events.QueueSettings{Mode: "coalesce", Drop: "oldest"}); a.Mode != "collect" || a.Drop != "old" || a.Debounce != nil {
		t.Fatalf("aliases = %+v", a)
	}
	if n := QueueSettingsFromWire(nil); n != (QueueSettings{}) {
		t.Fatalf("QueueSettingsFromWire(nil) = %+v", n)
	}
	if u := (QueueSettings{}).Wire(); u.String() != "defaults" {
		t.Fatalf("Wire(zero) = %s", u)
	}
	if o := s.Overrides(); o.Mode != queue.ModeCollect || o.Drop != queue.DropOld || o.Cap != 3 || o.Debounce == nil || *o.Debounce != 0 {
		t.Fatalf("Overrides = %+v", o)
	}
}
