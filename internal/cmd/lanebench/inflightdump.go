package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

var inflightHeapDump = flag.String("inflight-heapdump", "", "inflight: write a runtime heap dump (debug.WriteHeapDump) to this file while every turn is in flight, every allocation sampled: the objects' addresses show which spans hold the heap's slack")

// writeInflightHeapDump writes the heap dump -inflight-heapdump asks for.
func writeInflightHeapDump() error {
	if *inflightHeapDump == "" {
		return nil
	}
	f, err := os.Create(*inflightHeapDump)
	if err != nil {
		return fmt.Errorf("heap dump: %w", err)
	}
	runtime.GC()
	debug.WriteHeapDump(f.Fd())
	return f.Close()
}
