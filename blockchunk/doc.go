// Package blockchunk splits a streaming assistant reply into block replies:
// the reference runtime's streaming block chunker (break preference
// paragraph, newline or sentence; minimum and maximum size; fenced code
// blocks never split except at the maximum, where the fence is closed and
// reopened) and the coalescer that merges small blocks before they are sent.
//
// Sizes are counted in UTF-16 code units, as the reference (JavaScript) does.
// Both types are plain values driven by their caller: the chunker through
// Append and Drain, the coalescer through Add, Tick and Flush with the current
// time passed in. They are not safe for concurrent use; a run owns one of each.
//
// The package is pure: no NATS, no clocks, no goroutines.
package blockchunk
