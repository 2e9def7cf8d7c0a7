package sandbox

import (
	"testing"

	"github.com/lanefleet/lanefleet/internal/deptest"
)

// TestDeps keeps the sandbox below the tools and the fleet: no NATS, no
// lane runtime.
func TestDeps(t *testing.T) {
	t.Parallel()
	deptest.NoImports(t,
		deptest.Contains("nats-io"),
		deptest.Prefix("github.com/lanefleet/lanefleet/tools"),
		deptest.Prefix("github.com/lanefleet/lanefleet/runner"),
		deptest.Prefix("github.com/lanefleet/lanefleet/lanes"),
		deptest.Prefix("github.com/lanefleet/lanefleet/kvstore"),
		deptest.Prefix("github.com/lanefleet/lanefleet/internal/fleet"))
}
