package lanefleet

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// TestQueueSettingsWireForm: settings survive the trip to their wire form
// and back; aliases in the wire form read as their modes and policies.
func TestQueueSettingsWireForm(t *testing.T) {
	t.Parallel()
	zero := time.Duration(0)
	o := queue.Overrides{Mode: queue.ModeCollect, Debounce: &zero, Cap: 3, Drop: queue.DropOld}
	q := QueueSettingsOf(o)
	if got := q.String(); got != "mode collect, debounce 0ms, cap 3, drop old" {
		t.Fatalf("QueueSettingsOf = %s", got)
	}
	back := OverridesOf(q)
	if back.Mode != o.Mode || back.Debounce == nil || *back.Debounce != 0 || back.Cap != 3 || back.Drop != o.Drop {
		t.Fatalf("OverridesOf = %+v", back)
	}
	if a := OverridesOf(&events.QueueSettings{Mode: "coalesce", Drop: "oldest"}); a.Mode != queue.ModeCollect || a.Drop != queue.DropOld || a.Debounce != nil {
		t.Fatalf("aliases = %+v", a)
	}
	if n := OverridesOf(nil); n != (queue.Overrides{}) {
		t.Fatalf("OverridesOf(nil) = %+v", n)
	}
	if u := QueueSettingsOf(queue.Overrides{}); u.String() != "defaults" {
		t.Fatalf("QueueSettingsOf(zero) = %s", u)
	}
}
