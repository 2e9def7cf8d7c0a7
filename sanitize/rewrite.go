package sanitize

import "github.com/lanefleet/lanefleet/message"

// rewriter builds the output of a stage that keeps, replaces or drops the
// messages of src one by one, in order. Nothing is allocated while every
// message is kept. With inPlace the output overwrites src (the caller owns
// it); otherwise the first change copies the kept prefix to a new slice, so
// src is never written.
type rewriter struct {
	src     []message.Message
	dst     []message.Message
	inPlace bool
	w       int // messages written to the output so far
}

func (r *rewriter) start() {
	if r.dst != nil {
		return
	}
	if r.inPlace {
		r.dst = r.src
		return
	}
	r.dst = make([]message.Message, r.w, len(r.src))
	copy(r.dst, r.src[:r.w])
}

// keep passes src[i] through.
func (r *rewriter) keep(i int) {
	if r.dst != nil && (!r.inPlace || r.w != i) {
		if r.inPlace {
			r.dst[r.w] = r.src[i]
		} else {
			r.dst = append(r.dst, r.src[i])
		}
	}
	r.w++
}

// replace puts m in the place of the current message.
func (r *rewriter) replace(m message.Message) {
	r.start()
	if r.inPlace {
		r.dst[r.w] = m
	} else {
		r.dst = append(r.dst, m)
	}
	r.w++
}

// drop leaves the current message out.
func (r *rewriter) drop() { r.start() }

// result returns the output and whether it differs from src.
func (r *rewriter) result() ([]message.Message, bool) {
	if r.dst == nil {
		return r.src, false
	}
	if r.inPlace {
		clear(r.dst[r.w:])
		return r.dst[:r.w], true
	}
	return r.dst, true
}
