package fleet

import (
	"testing"

	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
)

// TestDefaultLimitsFitTheEmbeddedStore pins the sizing of the default
// byte limits: JetStream reserves them, so together they fit the embedded
// server's store and memory (with room to spare), and the transcripts'
// bucket has the largest share, so a flood fills the inbound stream first.
func TestDefaultLimitsFitTheEmbeddedStore(t *testing.T) {
	t.Parallel()
	file := int64(lanes.DefaultInboundMaxBytes + lanes.DefaultEventMaxBytes + lanes.DefaultDeadMaxBytes +
		kvstore.DefaultMaxBytes + authstore.DefaultMaxBytes)
	if file > embedded.DefaultMaxStore*7/8 {
		t.Errorf("file limits %d leave less than an eighth of the %d store", file, int64(embedded.DefaultMaxStore))
	}
	if kvstore.DefaultRunsMaxBytes > embedded.DefaultMaxMemory/2 {
		t.Errorf("runs bucket %d takes more than half of %d memory", kvstore.DefaultRunsMaxBytes, embedded.DefaultMaxMemory)
	}
	for name, v := range map[string]int64{"inbound": lanes.DefaultInboundMaxBytes, "events": lanes.DefaultEventMaxBytes,
		"dead letters": lanes.DefaultDeadMaxBytes, "auth": authstore.DefaultMaxBytes} {
		if v >= kvstore.DefaultMaxBytes {
			t.Errorf("%s (%d) is not smaller than the transcripts' bucket (%d)", name, v, int64(kvstore.DefaultMaxBytes))
		}
	}
}
