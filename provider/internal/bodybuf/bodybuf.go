// Package bodybuf keeps the buffers of large request bodies for the next
// requests: a long session's body (hundreds of kilobytes, written whole
// every turn) is written into a buffer an earlier request released rather
// than a new one, which the runtime would zero and the collector would
// count towards its next cycle. A buffer is released (Put) only once
// nothing reads it any more: send.Request.Done says when the transport is
// done with a body.
//
// Buffers are kept by size class (powers of two) in sync.Pools, so an idle
// process lets the collector have them back.
package bodybuf

import (
	"math/bits"
	"sync"
)

const (
	// MinPooled is the smallest body Get takes from the pools: a smaller
	// one costs less to allocate than to pool.
	MinPooled = 16 << 10
	minClass  = 14 // log2(MinPooled)
	maxClass  = 26 // 64 MiB: larger bodies are not kept
)

// pools[k-minClass] holds buffers of capacity at least 1<<k.
var pools [maxClass - minClass + 1]sync.Pool

// Get returns an empty buffer with room for n bytes: a released one when a
// pool has one, else a new one (of the next power of two from MinPooled
// on, so that it fits the bodies of its class when released).
func Get(n int) []byte {
	if n < MinPooled {
		return make([]byte, 0, n)
	}
	k := bits.Len(uint(n - 1)) // the least k with 1<<k >= n
	if k > maxClass {
		return make([]byte, 0, n)
	}
	if p, ok := pools[k-minClass].Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, 1<<k)
}

// Release returns what gives b back (Put) once nothing reads it, for
// adapter.Call.Done; nil when b is too small or too large to be kept: a
// body sent with a Done is not one net/http knows to be in memory (it
// flushes the headers on their own first), which only a body worth
// keeping pays for.
func Release(b []byte) func() {
	if c := cap(b); c < MinPooled || c >= 2<<maxClass {
		return nil
	}
	return func() { Put(b) }
}

// Put releases b for a later Get. Nothing may read or write b after: the
// caller must be its only user. Buffers too small or too large to pool are
// dropped.
func Put(b []byte) {
	c := cap(b)
	if c < MinPooled {
		return
	}
	k := bits.Len(uint(c)) - 1 // the largest k with 1<<k <= c
	if k > maxClass {
		return
	}
	b = b[:0]
	pools[k-minClass].Put(&b)
}
