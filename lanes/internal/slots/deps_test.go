package slots

import (
	"testing"

	"github.com/lanefleet/lanefleet/internal/deptest"
)

// TestNoNATS keeps the package pure: nothing it imports, directly or not,
// may be NATS.
func TestNoNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	deptest.NoImports(t, deptest.Contains("nats-io"), deptest.Suffix("/lanes"))
}
