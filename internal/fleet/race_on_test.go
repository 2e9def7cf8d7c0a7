//go:build race

package fleet

// raceEnabled: the race detector instruments every function and doubles
// the stack guard, so stack sizes are not the ones a worker has.
const raceEnabled = true
