package lanes

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// TestOverridesOf: a lane's stored settings become the session layer of
// queue.Resolve; none stored is an empty layer.
func TestOverridesOf(t *testing.T) {
	t.Parallel()
	ms := int64(250)
	o := overridesOf(&events.QueueSettings{Mode: "collect", DebounceMs: &ms, Cap: 4, Drop: "new"})
	if o.Mode != queue.ModeCollect || o.Debounce == nil || *o.Debounce != 250*time.Millisecond || o.Cap != 4 || o.Drop != queue.DropNew {
		t.Fatalf("overridesOf = %+v", o)
	}
	if s := queue.Resolve(overridesOf(nil)); s != queue.Resolve() {
		t.Fatalf("no settings resolve to %+v, want the defaults", s)
	}
}
