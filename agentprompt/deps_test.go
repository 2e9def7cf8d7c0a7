package agentprompt

import (
	"testing"

	"github.com/lanefleet/lanefleet/internal/deptest"
)

// TestDeps keeps the package pure: it reads files, but links no NATS, no
// lane runtime or store, no provider and no network code.
func TestDeps(t *testing.T) {
	t.Parallel()
	deptest.NoImports(t,
		deptest.Contains("nats-io"),
		deptest.Prefix("github.com/lanefleet/lanefleet/lanes"),
		deptest.Prefix("github.com/lanefleet/lanefleet/kvstore"),
		deptest.Prefix("github.com/lanefleet/lanefleet/provider"),
		deptest.Prefix("github.com/lanefleet/lanefleet/runner"),
		deptest.Exact("net"),
		deptest.Exact("net/http"),
		deptest.Exact("os/exec"))
}
