package fleet

import (
	"runtime/debug"
	"testing"
)

// TestTuneGC: the worker's collector target is GCPercent unless GOGC is
// set, which then stays the operator's.
func TestTuneGC(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	TuneGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != GCPercent {
		t.Fatalf("without GOGC the target is %d, want %d", got, GCPercent)
	}
	TuneGC(func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("with GOGC set the target moved to %d", got)
	}
}
