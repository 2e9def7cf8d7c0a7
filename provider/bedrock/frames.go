package bedrock

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
)

// The SDK reads a ConverseStream reply in two goroutines, handing each
// event over two channels and decoding its JSON through the schema
// serde: about 50 allocations and 70 µs an event, eleven times the cost
// of reading the same reply from Chat Completions. The adapter uses the
// SDK's parts for everything up to the response's headers (the request,
// its signature, credentials, the endpoint, error responses: client.go)
// and reads the event stream itself: frameReader checks and splits the
// frames (application/vnd.amazon.eventstream: a prelude of
// lengths with its CRC-32, headers, a JSON payload, the message's CRC-32)
// with one buffer for the whole stream.

// Frame bounds: a prelude and a message CRC around headers and payload;
// AWS caps a message at 16 MiB.
const (
	preludeLen = 12
	minFrame   = preludeLen + 4
	maxFrame   = 16 << 20
)

// errFrame is a malformed frame.
var errFrame = errors.New("bedrock: malformed event-stream frame")

// frameReader splits an event stream into frames.
type frameReader struct {
	r   *bufio.Reader
	pre [preludeLen]byte // the current frame's prelude (a field: on the stack it would escape)
	buf []byte           // the current frame past its prelude, reused
}

// frameReaders keeps the readers of finished calls: a reader's buffers
// (32 KiB, and its largest frame) were most of a short reply's
// allocations.
var frameReaders = sync.Pool{New: func() any { return &frameReader{r: bufio.NewReaderSize(nil, 32<<10)} }}

// maxPooledFrame bounds the frame buffer a pooled reader keeps.
const maxPooledFrame = 64 << 10

// newFrameReader returns a reader of r's frames, from the pool; release
// gives it back.
func newFrameReader(r io.Reader) *frameReader {
	f := frameReaders.Get().(*frameReader)
	f.r.Reset(r)
	return f
}

// release returns f to the pool; f is not used after.
func (f *frameReader) release() {
	f.r.Reset(nil)
	if cap(f.buf) > maxPooledFrame {
		f.buf = nil
	}
	frameReaders.Put(f)
}

// next returns the headers and payload of the next frame, valid until the
// following call; io.EOF at a frame boundary ends the stream, and a frame
// cut short is io.ErrUnexpectedEOF.
func (f *frameReader) next() (headers, payload []byte, err error) {
	pre := f.pre[:]
	if _, err := io.ReadFull(f.r, pre); err != nil {
		return nil, nil, err
	}
	total := binary.BigEndian.Uint32(pre[0:4])
	hlen := binary.BigEndian.Uint32(pre[4:8])
	if crc32.ChecksumIEEE(pre[:8]) != binary.BigEndian.Uint32(pre[8:12]) {
		return nil, nil, fmt.Errorf("%w: prelude checksum", errFrame)
	}
	if total < minFrame || total > maxFrame || hlen > total-minFrame {
		return nil, nil, fmt.Errorf("%w: length %d with %d bytes of headers", errFrame, total, hlen)
	}
	n := int(total) - preludeLen
	if cap(f.buf) < n {
		f.buf = make([]byte, n)
	}
	buf := f.buf[:n]
	if _, err := io.ReadFull(f.r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, err
	}
	sum := crc32.Update(crc32.ChecksumIEEE(pre), crc32.IEEETable, buf[:n-4])
	if sum != binary.BigEndian.Uint32(buf[n-4:]) {
		return nil, nil, fmt.Errorf("%w: message checksum", errFrame)
	}
	return buf[:hlen], buf[hlen : n-4], nil
}

// header returns the string value of header name in hs, nil when absent
// (or not a string). Header values of other types are skipped.
func header(hs []byte, name string) []byte {
	for len(hs) > 0 {
		n := int(hs[0])
		if 2+n > len(hs) {
			return nil
		}
		key, typ, rest := hs[1:1+n], hs[1+n], hs[2+n:]
		var size int
		switch typ {
		case 0, 1: // bool true, false
		case 2: // byte
			size = 1
		case 3: // int16
			size = 2
		case 4: // int32
			size = 4
		case 5, 8: // int64, timestamp
			size = 8
		case 9: // uuid
			size = 16
		case 6, 7: // bytes, string
			if len(rest) < 2 {
				return nil
			}
			l := int(binary.BigEndian.Uint16(rest))
			if 2+l > len(rest) {
				return nil
			}
			if typ == 7 && string(key) == name {
				return rest[2 : 2+l]
			}
			size = 2 + l
		default:
			return nil
		}
		if size > len(rest) {
			return nil
		}
		hs = rest[size:]
	}
	return nil
}
