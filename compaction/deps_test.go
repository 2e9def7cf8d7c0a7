package compaction

import (
	"testing"

	"github.com/lanefleet/lanefleet/internal/deptest"
)

// TestDeps keeps the package pure: no NATS, no lane runtime, no store and
// no provider adapter (it talks to the provider.Provider it is given).
func TestDeps(t *testing.T) {
	t.Parallel()
	deptest.NoImports(t,
		deptest.Contains("nats-io"),
		deptest.Prefix("github.com/lanefleet/lanefleet/lanes"),
		deptest.Prefix("github.com/lanefleet/lanefleet/kvstore"),
		deptest.Prefix("github.com/lanefleet/lanefleet/runner"),
		deptest.Prefix("github.com/lanefleet/lanefleet/provider/"),
		deptest.Exact("net/http"))
}
