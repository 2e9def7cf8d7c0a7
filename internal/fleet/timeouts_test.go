package fleet

import (
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
)

// TestTimeoutsInsideLease: a wait the member makes during a turn (a state
// write, an async publish) ends well within the default lease TTL and
// dispatch AckWait, so the turn's lease is renewed and its delivery acked
// in time whatever that wait meets.
func TestTimeoutsInsideLease(t *testing.T) {
	t.Parallel()
	bound := min(kvstore.DefaultLeaseTTL, lanes.DefaultAckWait) / 2
	for name, d := range map[string]time.Duration{"stateTimeout": stateTimeout, "publishAsyncTimeout": publishAsyncTimeout} {
		if d > bound {
			t.Errorf("%s %v: over half the default lease TTL / AckWait (%v)", name, d, bound)
		}
	}
}
