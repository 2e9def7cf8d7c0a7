package registry_test

import (
	"testing"

	"github.com/lanefleet/lanefleet/internal/deptest"
)

// TestNoNATS keeps the provider layer pure: nothing it links may be NATS.
func TestNoNATS(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	deptest.PackagesNoImports(t, []string{"github.com/lanefleet/lanefleet/provider/..."},
		deptest.Contains("nats-io"))
}
