package lanes

import "github.com/lanefleet/lanefleet/lanes/internal/lanestest"

// The package's tests wait with lanestest's helpers: waitFor polls a
// condition, waitClosed waits on a channel, each bounded by one timeout.
var (
	waitFor    = lanestest.WaitFor
	waitClosed = lanestest.WaitClosed
)
