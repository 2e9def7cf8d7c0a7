// Package blockchunk splits a streaming assistant reply into block replies:
// the reference runtime's streaming block chunker (break preference
// paragraph, newline or sentence; minimum and maximum size; fenced code
// blocks never split except at the maximum, where the fence is closed and
// reopened).
//
// Sizes are counted in UTF-16 code units, as the reference (JavaScript) does.
// A Chunker is a plain value driven by its caller through Append and Drain;
// it is not safe for concurrent use: a run owns one.
//
// The reference also coalesces blocks (merges small ones within an idle
// time) in the layer that delivers them to a chat channel; the fleet has no
// such layer, so block events carry the chunker's blocks as they are.
//
// The package is pure: no NATS, no clocks, no goroutines.
package blockchunk
