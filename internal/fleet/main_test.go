package fleet

import (
	"os"
	"testing"

	"github.com/lanefleet/lanefleet/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Main() // members with exec confine its commands with this binary
	os.Exit(m.Run())
}
