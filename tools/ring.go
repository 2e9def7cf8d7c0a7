package tools

import (
	"strings"
	"sync"
)

// ring keeps the last bytes of a stream within a cap and counts every
// byte written, so a reader can ask for what came after an absolute
// offset and learn how much of it was dropped. It is safe for concurrent
// use; changed is closed and replaced on every write, for waiters.
type ring struct {
	mu      sync.Mutex
	buf     []byte // the last len(buf) <= capacity bytes
	cap     int
	total   int64 // bytes ever written
	changed chan struct{}
}

func newRing(capacity int) *ring {
	return &ring{cap: max(capacity, 1), changed: make(chan struct{})}
}

// Write implements io.Writer; it never fails.
func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	r.total += int64(n)
	if len(p) >= r.cap {
		r.buf = append(r.buf[:0], p[len(p)-r.cap:]...)
	} else {
		if over := len(r.buf) + len(p) - r.cap; over > 0 {
			r.buf = append(r.buf[:0], r.buf[over:]...)
		}
		r.buf = append(r.buf, p...)
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return n, nil
}

// since returns the kept bytes written at or after the absolute offset
// from, how many bytes after from were dropped before them, and the
// offset of the end (the next since's from).
func (r *ring) since(from int64) (text string, dropped, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := r.total - int64(len(r.buf)) // offset of buf[0]
	from = max(from, 0)
	if from < start {
		dropped = start - from
		from = start
	}
	if from > r.total {
		from = r.total
	}
	return strings.ToValidUTF8(string(r.buf[from-start:]), "\uFFFD"), dropped, r.total
}

// wait returns a channel closed at the next write.
func (r *ring) wait() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// size returns the bytes written so far.
func (r *ring) size() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}
