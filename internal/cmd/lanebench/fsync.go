package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// fsyncProbe is what one fsync costs on the disk under the store,
// measured in the same run as the turns it bounds: with sync always the
// server appends each message to its block file and fsyncs it before it
// answers, one message after another per stream, so a fresh session's
// turn waits on freshTurnFsyncs of them in series and AGENT_IN's two
// fsyncs a turn bound a node's turns a second.
type fsyncProbe struct {
	lat  []time.Duration
	mean time.Duration
}

// freshTurnFsyncs are the fsyncs a fresh session's turn waits on in
// series with sync always: its message, the lease, the record (the table
// "A fresh session's turn, in order" in docs/scaling.md).
const freshTurnFsyncs = 3

// agentInFsyncs are AGENT_IN's fsyncs a turn: the message and the
// tombstone of its delete.
const agentInFsyncs = 2

// probeFsync appends n blocks of size bytes to a file in dir, fsyncing
// each, as the server's file store does with sync always.
func probeFsync(dir string, n, size int) (fsyncProbe, error) {
	f, err := os.CreateTemp(dir, "fsync-probe-*")
	if err != nil {
		return fsyncProbe{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, size)
	var p fsyncProbe
	var sum time.Duration
	for range n {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return fsyncProbe{}, fmt.Errorf("probe write: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fsyncProbe{}, fmt.Errorf("probe fsync: %w", err)
		}
		d := time.Since(t0)
		p.lat = append(p.lat, d)
		sum += d
	}
	p.mean = sum / time.Duration(n)
	return p, nil
}

// print says what the disk's fsyncs bound: the part of a fresh turn's
// latency they take, and AGENT_IN's turns a second.
func (p fsyncProbe) print(dir string) {
	p50 := ms(p.lat, 50)
	fmt.Printf("  this disk's fsync (4 KiB append + fsync, %d times, in %s): p50 %.2f ms, p90 %.2f ms, mean %.2f ms\n",
		len(p.lat), filepath.Dir(dir), p50, ms(p.lat, 90), float64(p.mean.Microseconds())/1000)
	fmt.Printf("  with sync always a fresh turn waits on %d fsyncs in series: %.2f ms at p50 of the turn's latency is the disk's; AGENT_IN's %d fsyncs a turn bound a node at %.0f turns/s (1 / (%d × mean))\n",
		freshTurnFsyncs, freshTurnFsyncs*p50, agentInFsyncs, 1/(agentInFsyncs*p.mean.Seconds()), agentInFsyncs)
}
