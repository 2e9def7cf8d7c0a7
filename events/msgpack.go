package events

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Every msgpack payload Lanefleet reads comes from NATS (inbound messages,
// events, KV records), so anyone who can publish there picks its bytes. The
// msgpack library allocates what a header declares (an array header of 5
// bytes can ask for 2^32-1 elements) and recurses once per nesting level, so
// a payload is walked first: CheckMsgpack proves that every declared length
// fits in the bytes that follow and that the nesting stays within MaxDepth.
// After the walk, the decoder can allocate at most in proportion to the
// payload's actual size.

// MaxDepth is the deepest nesting of arrays and maps a msgpack payload may
// have. It is encoding/json's own limit (10000) plus room for the envelopes
// that carry a JSON value (an event's args, a transcript record's tool call
// arguments), so whatever a worker encodes from JSON it accepted decodes
// again.
const MaxDepth = 10000 + 64

// Errors wrapped by a *MsgpackError, for callers and tests that branch.
var (
	// ErrTruncated: a header declares more bytes or elements than the
	// payload holds after it.
	ErrTruncated = errors.New("declares more than the payload holds")
	// ErrTooDeep: arrays and maps nest deeper than MaxDepth.
	ErrTooDeep = errors.New("nested too deeply")
)

// MsgpackError is a msgpack payload refused before decoding, or one the
// decoder could not read.
type MsgpackError struct {
	Offset int    // where the offending value starts; -1 when unknown
	Reason string // what is wrong, safe to show the sender
	Err    error  // ErrTruncated, ErrTooDeep, or the decoder's error
}

func (e *MsgpackError) Error() string {
	if e.Offset < 0 {
		return e.Reason
	}
	return fmt.Sprintf("%s (at byte %d)", e.Reason, e.Offset)
}

func (e *MsgpackError) Unwrap() error { return e.Err }

// CheckMsgpack walks one msgpack value that must fill data exactly, without
// decoding or allocating it: every str, bin and ext length must fit in the
// bytes left, every array or map must declare no more elements than bytes
// left (each element takes at least one byte, a map pair two), and arrays
// and maps may nest at most MaxDepth deep. It returns a *MsgpackError.
func CheckMsgpack(data []byte) error {
	return checkMsgpack(data, 0)
}

// MaxInboundValues bounds the values (scalars, strings, arrays and maps,
// counted alike) in one inbound msgpack message. The walk bounds a
// decoder's allocations by the payload's size, but a payload of one-byte
// elements still decodes into tens of times its size (4 MiB of nils in
// "images" are 4 Mi Images, 128 MiB); a real message has a few values per
// client tool parameter, far below this.
const MaxInboundValues = 1 << 16

// checkMsgpack is CheckMsgpack; maxValues > 0 also bounds the values read.
func checkMsgpack(data []byte, maxValues int) error {
	// open holds, per open array or map (innermost last), how many of its
	// elements are still to come; only its length matters (the depth).
	// Sixteen levels cover every payload the fleet writes without a heap
	// allocation.
	var stack [16]uint64
	open := stack[:0]
	pending := uint64(1) // values still to read: the top-level one
	pos, values := 0, 0
	for pending > 0 {
		if values++; maxValues > 0 && values > maxValues {
			return &MsgpackError{Offset: pos, Reason: fmt.Sprintf("more than %d values", maxValues), Err: ErrTooLarge}
		}
		for len(open) > 0 && open[len(open)-1] == 0 {
			open = open[:len(open)-1]
		}
		if len(open) > 0 {
			open[len(open)-1]--
		}
		start := pos
		if pos >= len(data) {
			return &MsgpackError{Offset: start, Reason: "payload ends where a value should start", Err: ErrTruncated}
		}
		c := data[pos]
		pos++
		pending--
		var (
			skip, items uint64 // bytes after the header; elements of an array or map
			container   bool
			what        string
			err         error
		)
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			// fixint, nil, bool: the code is the value
		case c <= 0x8f: // fixmap
			items, container, what = 2*uint64(c&0x0f), true, "map"
		case c <= 0x9f: // fixarray
			items, container, what = uint64(c&0x0f), true, "array"
		case c <= 0xbf: // fixstr
			skip, what = uint64(c&0x1f), "str"
		default:
			switch c {
			case 0xc4, 0xc5, 0xc6: // bin 8/16/32
				skip, pos, err = readLen(data, pos, 1<<(c-0xc4))
				what = "bin"
			case 0xd9, 0xda, 0xdb: // str 8/16/32
				skip, pos, err = readLen(data, pos, 1<<(c-0xd9))
				what = "str"
			case 0xc7, 0xc8, 0xc9: // ext 8/16/32: length, then a type byte
				skip, pos, err = readLen(data, pos, 1<<(c-0xc7))
				skip++
				what = "ext"
			case 0xca, 0xce, 0xd2: // float32, uint32, int32
				skip = 4
			case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
				skip = 8
			case 0xcc, 0xd0: // uint8, int8
				skip = 1
			case 0xcd, 0xd1: // uint16, int16
				skip = 2
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1/2/4/8/16, after a type byte
				skip = 1 + 1<<(c-0xd4)
			case 0xdc, 0xdd: // array 16/32
				items, pos, err = readLen(data, pos, 2<<(c-0xdc))
				container, what = true, "array"
			case 0xde, 0xdf: // map 16/32
				items, pos, err = readLen(data, pos, 2<<(c-0xde))
				items *= 2
				container, what = true, "map"
			default: // 0xc1
				return &MsgpackError{Offset: start, Reason: "byte 0xc1 is not a msgpack type"}
			}
			if err != nil {
				return &MsgpackError{Offset: start, Reason: "payload ends inside a header", Err: ErrTruncated}
			}
		}
		rest := uint64(len(data) - pos)
		if skip > rest {
			return &MsgpackError{Offset: start, Reason: fmt.Sprintf("%s declares %d bytes, %d remain", what, skip, rest), Err: ErrTruncated}
		}
		pos += int(skip)
		rest -= skip
		if container {
			if len(open) >= MaxDepth {
				return &MsgpackError{Offset: start, Reason: fmt.Sprintf("arrays and maps nest deeper than %d", MaxDepth), Err: ErrTooDeep}
			}
			if pending+items > rest {
				n := items
				if what == "map" {
					n /= 2
				}
				return &MsgpackError{Offset: start, Reason: fmt.Sprintf("%s declares %d elements, %d bytes remain", what, n, rest), Err: ErrTruncated}
			}
			pending += items
			if items > 0 {
				open = append(open, items)
			}
		} else if pending > rest {
			return &MsgpackError{Offset: start, Reason: "payload ends early", Err: ErrTruncated}
		}
	}
	if pos != len(data) {
		return &MsgpackError{Offset: pos, Reason: fmt.Sprintf("%d bytes after the value", len(data)-pos)}
	}
	return nil
}

// readLen reads an n-byte big-endian length at pos.
func readLen(data []byte, pos, n int) (uint64, int, error) {
	if len(data)-pos < n {
		return 0, pos, ErrTruncated
	}
	b := data[pos : pos+n]
	switch n {
	case 1:
		return uint64(b[0]), pos + n, nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), pos + n, nil
	default:
		return uint64(binary.BigEndian.Uint32(b)), pos + n, nil
	}
}

// UnmarshalMsgpack decodes the msgpack value data holds into v, after
// CheckMsgpack has accepted it. Every msgpack decode of bytes from NATS goes
// through it (or through DecodeInbound and DecodeEvent, which use it). It
// returns a *MsgpackError.
func UnmarshalMsgpack(data []byte, v any) error {
	return unmarshalMsgpack(data, v, false, 0)
}

// unmarshalMsgpack is UnmarshalMsgpack; strict rejects map keys that name
// no field of a struct; maxValues > 0 bounds the values data may hold.
func unmarshalMsgpack(data []byte, v any, strict bool, maxValues int) error {
	if err := checkMsgpack(data, maxValues); err != nil {
		return err
	}
	return decodeChecked(data, v, strict)
}

// decodeChecked decodes data, which checkMsgpack has accepted, into v with
// the library.
func decodeChecked(data []byte, v any, strict bool) error {
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(bytes.NewReader(data))
	dec.DisallowUnknownFields(strict)
	if err := dec.Decode(v); err != nil {
		return &MsgpackError{Offset: -1, Reason: err.Error(), Err: err}
	}
	return nil
}
