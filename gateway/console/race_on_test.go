//go:build race

package console_test

// raceEnabled: the race detector slows the Go side about tenfold.
const raceEnabled = true
