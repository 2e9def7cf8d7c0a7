package main

import (
	"flag"
	"fmt"
	"runtime/metrics"
)

// turnsAllocs (-turns-allocs) prints, under each turns scenario's row, the
// heap allocations the whole process (server, worker, client and mock)
// made per turn and the bytes they took, counted by the runtime over the
// measured turns: CPU per turn swings with a shared box's load, these do
// not.
var turnsAllocs = flag.Bool("turns-allocs", false, "turns: print each scenario's heap allocations per turn (objects and bytes, the whole process) under its row")

// allocCount is the process's heap allocations so far: objects and bytes.
type allocCount struct{ objects, bytes uint64 }

func allocsNow() allocCount {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return allocCount{objects: s[0].Value.Uint64(), bytes: s[1].Value.Uint64()}
}

// printAllocsPerTurn prints what the process allocated between a and b
// over n turns, when -turns-allocs is set.
func printAllocsPerTurn(a, b allocCount, n int) {
	if !*turnsAllocs || n == 0 {
		return
	}
	fmt.Printf("             allocations per turn (whole process): %.0f objects, %.1f KB\n",
		float64(b.objects-a.objects)/float64(n), float64(b.bytes-a.bytes)/1024/float64(n))
}
