package tools

import (
	"testing"

	"github.com/lanefleet/lanefleet/internal/deptest"
)

// TestDeps keeps the built-in tools free of the fleet: no NATS, no lane
// runtime, no KV store. The run loop calls them; they never call back.
func TestDeps(t *testing.T) {
	t.Parallel()
	deptest.NoImports(t,
		deptest.Contains("nats-io"),
		deptest.Prefix("github.com/lanefleet/lanefleet/lanes"),
		deptest.Prefix("github.com/lanefleet/lanefleet/kvstore"),
		deptest.Prefix("github.com/lanefleet/lanefleet/runner"))
}
