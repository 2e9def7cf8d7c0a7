//go:build race

package gateway

// raceEnabled: the race detector slows the code it watches about tenfold.
const raceEnabled = true
