// Package sse decodes a server-sent-events body copying it at most once:
// Next returns each event's name and data as slices valid until the
// following call.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// MaxLine is the longest line the reader accepts (8 MiB); longer lines end
// the stream with ErrLineTooLong.
const MaxLine = 8 << 20

// ErrLineTooLong reports a line above MaxLine.
var ErrLineTooLong = errors.New("sse: line too long")

// Event is one dispatched event. Name is empty for data-only events. Both
// slices are only valid until the next call to Next.
type Event struct {
	Name []byte
	Data []byte
}

// Reader reads events from an SSE body.
type Reader struct {
	r        *bufio.Reader
	name     []byte
	data     []byte
	long     []byte
	n        int64
	has      bool
	dataSeen bool
}

// bufSize is the read buffer of a Reader; longer lines are gathered
// apart (up to MaxLine). A model's events are mostly deltas of a few
// hundred bytes, and a stream holds its buffer for as long as the model
// takes: 64 KiB (before) was the largest part of what a streaming turn
// in flight held (lanebench -scenario inflight -inflight-http
// -inflight-stream). A long line (a whole response in one event) now
// costs a copy into the gathered line, not a larger buffer for every
// stream.
const bufSize = 4 << 10

// buffers keeps the read buffers of closed Readers for the next streams:
// a turn's stream would otherwise leave its buffer behind as garbage.
var buffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bufSize) }}

// NewReader returns a Reader over r. Close gives its buffer back.
func NewReader(r io.Reader) *Reader {
	br := buffers.Get().(*bufio.Reader)
	br.Reset(r)
	return &Reader{r: br}
}

// Close releases the reader's buffer for another Reader; the reader and
// the slices of the events it returned must not be used after. Closing
// twice is harmless.
func (r *Reader) Close() {
	if r.r == nil {
		return
	}
	r.r.Reset(nil)
	buffers.Put(r.r)
	r.r = nil
}

// BytesRead returns how many body bytes were consumed so far.
func (r *Reader) BytesRead() int64 { return r.n }

// Next returns the next event. At the end of the body it returns io.EOF; an
// event whose blank terminating line is missing at the end of the body is
// still returned first. Comment lines (":") and the id and retry fields are
// skipped; several data lines are joined with "\n"; CRLF and LF line ends
// are accepted. Other read errors are returned wrapped.
func (r *Reader) Next() (Event, error) {
	r.name = r.name[:0]
	r.data = r.data[:0]
	r.has, r.dataSeen = false, false
	for {
		line, err := r.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && r.has {
				return Event{Name: r.name, Data: r.data}, nil
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if r.has {
				return Event{Name: r.name, Data: r.data}, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if r.dataSeen {
				r.data = append(r.data, '\n')
			}
			r.data = append(r.data, value...)
			r.has, r.dataSeen = true, true
		case "event":
			r.name = append(r.name[:0], value...)
			r.has = true
		}
	}
}

// readLine returns one line without its line end, valid until the next read.
func (r *Reader) readLine() ([]byte, error) {
	line, err := r.r.ReadSlice('\n')
	r.n += int64(len(line))
	if errors.Is(err, bufio.ErrBufferFull) {
		r.long = append(r.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(r.long) > MaxLine {
				return nil, ErrLineTooLong
			}
			line, err = r.r.ReadSlice('\n')
			r.n += int64(len(line))
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("sse: read: %w", err)
	}
	if len(line) == 0 && err != nil {
		return nil, io.EOF
	}
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}
