package guard

import (
	"testing"

	"github.com/lanefleet/lanefleet/internal/deptest"
)

// TestDeps keeps the package pure: no NATS, no network adapters.
func TestDeps(t *testing.T) {
	t.Parallel()
	deptest.NoImports(t,
		deptest.Contains("nats-io"),
		deptest.Prefix("github.com/lanefleet/lanefleet/lanes"),
		deptest.Prefix("github.com/lanefleet/lanefleet/kvstore"))
}
