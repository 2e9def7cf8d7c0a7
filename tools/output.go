package tools

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// headTail keeps the first and the last bytes of a stream within a cap,
// counting what it drops. It is safe for concurrent use.
type headTail struct {
	mu       sync.Mutex
	headCap  int
	tailCap  int
	head     []byte
	tail     []byte // the last bytes after head; trimmed lazily to tailCap
	total    int64
	newlines int64
	dirty    bool
}

func newHeadTail(limit int) *headTail {
	h := limit / 2
	return &headTail{headCap: h, tailCap: limit - h}
}

// Write implements io.Writer; it never fails.
func (o *headTail) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total += int64(len(p))
	o.newlines += int64(bytes.Count(p, []byte{'\n'}))
	o.dirty = true
	n := len(p)
	if room := o.headCap - len(o.head); room > 0 {
		k := min(room, len(p))
		o.head = append(o.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if len(p) >= o.tailCap {
		o.tail = append(o.tail[:0], p[len(p)-o.tailCap:]...)
		return n, nil
	}
	o.tail = append(o.tail, p...)
	if len(o.tail) > 2*o.tailCap {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-o.tailCap:]...)
	}
	return n, nil
}

// takeDirty reports whether bytes arrived since the last call.
func (o *headTail) takeDirty() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.dirty
	o.dirty = false
	return d
}

// snapshot renders what was kept: all of it when nothing was dropped,
// otherwise the head and the tail (each cut at a line boundary when one is
// near) around a notice of what was omitted. Invalid UTF-8 becomes U+FFFD.
func (o *headTail) snapshot() (text string, truncated bool, total int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	tail := o.tail
	if len(tail) > o.tailCap {
		tail = tail[len(tail)-o.tailCap:]
	}
	if o.total <= int64(o.headCap+o.tailCap) {
		s := string(o.head) + string(tail)
		return strings.ToValidUTF8(s, "\uFFFD"), false, o.total
	}
	head := o.head
	// Cut the head after its last newline and the tail after its first,
	// when that loses less than half of each.
	if i := bytes.LastIndexByte(head, '\n'); i >= len(head)/2 {
		head = head[:i+1]
	} else {
		head = head[:runeStart(head, len(head))]
	}
	if i := bytes.IndexByte(tail, '\n'); i >= 0 && i < len(tail)/2 {
		tail = tail[i+1:]
	} else {
		tail = tail[runeStart(tail, 0):]
	}
	omitted := o.total - int64(len(head)) - int64(len(tail))
	omittedLines := o.newlines - int64(bytes.Count(head, []byte{'\n'})) - int64(bytes.Count(tail, []byte{'\n'}))
	notice := fmt.Sprintf("\n[... %s omitted (about %d lines) of %s total output: showing the first %s and the last %s. Redirect output to a file and read it in parts to see everything ...]\n",
		formatSize(omitted), max(omittedLines, 0), formatSize(o.total), formatSize(int64(len(head))), formatSize(int64(len(tail))))
	s := strings.ToValidUTF8(string(head), "\uFFFD") + notice + strings.ToValidUTF8(string(tail), "\uFFFD")
	return s, true, o.total
}

// runeStart moves i forward (at most 3 bytes) to the start of a UTF-8
// character of b, or back when i == len(b), so cuts do not split characters.
func runeStart(b []byte, i int) int {
	if i == len(b) {
		for k := i; k > 0 && k > i-utf8.UTFMax; k-- {
			if utf8.RuneStart(b[k-1]) {
				if utf8.FullRune(b[k-1 : i]) {
					return i
				}
				return k - 1
			}
		}
		return i
	}
	for k := i; k < len(b) && k < i+utf8.UTFMax; k++ {
		if utf8.RuneStart(b[k]) {
			return k
		}
	}
	return i
}
