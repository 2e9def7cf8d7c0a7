package authprofile

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the package pure: no NATS, no network adapters.
func TestDeps(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "nats-io") || strings.HasPrefix(dep, "github.com/lanefleet/lanefleet/lanes") || strings.HasPrefix(dep, "github.com/lanefleet/lanefleet/kvstore") {
			t.Errorf("impure dependency %s", dep)
		}
	}
}
