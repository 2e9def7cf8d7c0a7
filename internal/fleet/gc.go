package fleet

import "runtime/debug"

// GCPercent is the garbage collector's target a worker process runs with
// unless its environment sets GOGC: with Go's default (100) a worker
// spends about a fifth of its CPU collecting, since a turn allocates far
// more than it keeps; at 200 the CPU per turn falls 15–20% (lanebench
// -scenario turns, conc64 and conc256, same quiet machine) for about 20 MB
// more RSS idle, and 1,000 turns in flight stay under 400 MB.
const GCPercent = 200

// TuneGC sets the collector's target to GCPercent when getenv has no GOGC.
// A process calls it once, at start-up (cmd/worker, and cmd/lanebench so
// that it measures what the worker runs).
func TuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
}
