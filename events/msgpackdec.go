package events

import (
	"encoding/binary"
	"math"
)

// readEvent is DecodeEvent's fast path, the decoder's counterpart of
// appendEvent: it reads an event of the shape workers write (maps with the
// known keys, each once, in the types appendEvent writes them) without the
// library's reflection. On anything else (an unknown or repeated key, a
// value of another msgpack type, args or a payload) it returns false and
// DecodeEvent decodes data with the library, as before; so readEvent only
// ever agrees with it (FuzzReadEventAsLibrary). data has passed
// checkMsgpack.
func readEvent(data []byte, e *Event) bool {
	r := mpReader{b: data}
	return r.fields(func(k []byte) (uint64, bool) {
		switch string(k) {
		case "v":
			return setInt(&r, &e.V, 1<<0)
		case "runId":
			return r.setStr(&e.RunID, 1<<1)
		case "sessionKey":
			return r.setStr(&e.SessionKey, 1<<2)
		case "seq":
			return setInt(&r, &e.Seq, 1<<3)
		case "attempt":
			return setInt(&r, &e.Attempt, 1<<4)
		case "stream":
			return r.setStr(&e.Stream, 1<<5)
		case "ts":
			return setInt(&r, &e.TS, 1<<6)
		case "data":
			return 1 << 7, r.eventData(&e.Data)
		}
		return 0, false
	}) && r.i == len(r.b)
}

func (r *mpReader) eventData(d *EventData) bool {
	return r.fields(func(k []byte) (uint64, bool) {
		switch string(k) {
		case "phase":
			return r.setStr(&d.Phase, 1<<0)
		case "text":
			return r.setStr(&d.Text, 1<<1)
		case "delta":
			return r.setStr(&d.Delta, 1<<2)
		case "startedAt":
			return setInt(r, &d.StartedAt, 1<<3)
		case "endedAt":
			return setInt(r, &d.EndedAt, 1<<4)
		case "error":
			return r.setStr(&d.Error, 1<<5)
		case "worker":
			return r.setStr(&d.Worker, 1<<6)
		case "tenant":
			return r.setStr(&d.Tenant, 1<<7)
		case "parentSession":
			return r.setStr(&d.ParentSession, 1<<8)
		case "parentRun":
			return r.setStr(&d.ParentRun, 1<<9)
		case "attempt":
			return setInt(r, &d.Attempt, 1<<10)
		case "steps":
			return setInt(r, &d.Steps, 1<<11)
		case "inboundSeq":
			return setInt(r, &d.InboundSeq, 1<<12)
		case "name":
			return r.setStr(&d.Name, 1<<13)
		case "toolCallId":
			return r.setStr(&d.ToolCallID, 1<<14)
		case "result":
			return 1 << 15, readPtr(r, &d.Result, (*mpReader).result)
		case "willRetry":
			return r.setBool(&d.WillRetry, 1<<16)
		case "isError":
			return r.setBool(&d.IsError, 1<<17)
		case "delayMs":
			return setInt(r, &d.DelayMs, 1<<18)
		case "maxAttempts":
			return setInt(r, &d.MaxAttempts, 1<<19)
		case "provider":
			return r.setStr(&d.Provider, 1<<20)
		case "model":
			return r.setStr(&d.Model, 1<<21)
		case "authProfile":
			return r.setStr(&d.AuthProfile, 1<<22)
		case "hop":
			return setInt(r, &d.Hop, 1<<23)
		case "reason":
			return r.setStr(&d.Reason, 1<<24)
		}
		return 0, false // args, payload (values of their own type), or unknown
	})
}

func (r *mpReader) result(x *Result) bool {
	return r.fields(func(k []byte) (uint64, bool) {
		var ok bool
		switch string(k) {
		case "payloads":
			x.Payloads, ok = readSlice(r, func(r *mpReader, p *Payload) bool {
				return r.fields(func(k []byte) (uint64, bool) {
					switch string(k) {
					case "text":
						return r.setStr(&p.Text, 1<<0)
					case "isError":
						return r.setBool(&p.IsError, 1<<1)
					}
					return 0, false
				})
			})
			return 1 << 0, ok
		case "meta":
			return 1 << 1, r.meta(&x.Meta)
		}
		return 0, false
	})
}

func (r *mpReader) meta(x *Meta) bool {
	return r.fields(func(k []byte) (uint64, bool) {
		var ok bool
		switch string(k) {
		case "durationMs":
			return setInt(r, &x.DurationMs, 1<<0)
		case "aborted":
			return r.setBool(&x.Aborted, 1<<1)
		case "agentMeta":
			ok = readPtr(r, &x.AgentMeta, (*mpReader).agentMeta)
			return 1 << 2, ok
		case "error":
			ok = readPtr(r, &x.Error, func(r *mpReader, e *RunError) bool {
				return r.fields(func(k []byte) (uint64, bool) {
					switch string(k) {
					case "kind":
						return r.setStr(&e.Kind, 1<<0)
					case "message":
						return r.setStr(&e.Message, 1<<1)
					}
					return 0, false
				})
			})
			return 1 << 3, ok
		case "stopReason":
			return r.setStr(&x.StopReason, 1<<4)
		case "pendingToolCalls":
			x.PendingToolCalls, ok = readSlice(r, func(r *mpReader, c *PendingCall) bool {
				return r.fields(func(k []byte) (uint64, bool) {
					switch string(k) {
					case "id":
						return r.setStr(&c.ID, 1<<0)
					case "name":
						return r.setStr(&c.Name, 1<<1)
					case "arguments":
						return r.setStr(&c.Arguments, 1<<2)
					case "approval":
						return r.setBool(&c.Approval, 1<<3)
					}
					return 0, false
				})
			})
			return 1 << 5, ok
		case "mergedInto":
			return r.setStr(&x.MergedInto, 1<<6)
		case "consumed":
			x.Consumed, ok = readSlice(r, func(r *mpReader, c *ConsumedRun) bool {
				return r.fields(func(k []byte) (uint64, bool) {
					switch string(k) {
					case "runId":
						return r.setStr(&c.RunID, 1<<0)
					case "kind":
						return r.setStr(&c.Kind, 1<<1)
					case "reason":
						return r.setStr(&c.Reason, 1<<2)
					}
					return 0, false
				})
			})
			return 1 << 7, ok
		case "heartbeatOk":
			return r.setBool(&x.HeartbeatOK, 1<<8)
		case "session":
			ok = readPtr(r, &x.Session, (*mpReader).sessionState)
			return 1 << 9, ok
		case "waiting":
			return setInt(r, &x.Waiting, 1<<10)
		}
		return 0, false
	})
}

func (r *mpReader) agentMeta(a *AgentMeta) bool {
	return r.fields(func(k []byte) (uint64, bool) {
		switch string(k) {
		case "sessionId":
			return r.setStr(&a.SessionID, 1<<0)
		case "provider":
			return r.setStr(&a.Provider, 1<<1)
		case "model":
			return r.setStr(&a.Model, 1<<2)
		case "compactionCount":
			return setInt(r, &a.CompactionCount, 1<<3)
		case "promptTokens":
			return setInt(r, &a.PromptTokens, 1<<4)
		case "usage":
			return 1 << 5, readPtr(r, &a.Usage, (*mpReader).usage)
		case "lastCallUsage":
			return 1 << 6, readPtr(r, &a.LastCallUsage, (*mpReader).usage)
		}
		return 0, false
	})
}

func (r *mpReader) usage(u *UsageMeta) bool {
	return r.fields(func(k []byte) (uint64, bool) {
		switch string(k) {
		case "input":
			return setInt(r, &u.Input, 1<<0)
		case "output":
			return setInt(r, &u.Output, 1<<1)
		case "cacheRead":
			return setInt(r, &u.CacheRead, 1<<2)
		case "cacheWrite":
			return setInt(r, &u.CacheWrite, 1<<3)
		case "total":
			return setInt(r, &u.Total, 1<<4)
		case "cost":
			return 1 << 5, readPtr(r, &u.Cost, func(r *mpReader, c *CostMeta) bool {
				return r.fields(func(k []byte) (uint64, bool) {
					switch string(k) {
					case "input":
						return r.setFloat64(&c.Input, 1<<0)
					case "output":
						return r.setFloat64(&c.Output, 1<<1)
					case "cacheRead":
						return r.setFloat64(&c.CacheRead, 1<<2)
					case "cacheWrite":
						return r.setFloat64(&c.CacheWrite, 1<<3)
					case "total":
						return r.setFloat64(&c.Total, 1<<4)
					}
					return 0, false
				})
			})
		}
		return 0, false
	})
}

// sessionState reads the session's state of a final event. Its sub-agent
// fields (parent, children, approvals) are rare in events: those are left
// to the library.
func (r *mpReader) sessionState(s *SessionState) bool {
	return r.fields(func(k []byte) (uint64, bool) {
		switch string(k) {
		case "authProfile":
			return r.setStr(&s.AuthProfile, 1<<0)
		case "usage":
			return 1 << 1, readPtr(r, &s.Usage, (*mpReader).usage)
		case "turns":
			return setInt(r, &s.Turns, 1<<2)
		case "childUsage":
			return 1 << 3, readPtr(r, &s.ChildUsage, (*mpReader).usage)
		}
		return 0, false
	})
}

// fields reads a map into a struct: field reads the value of key k and
// returns its bit (a distinct one per key) and whether it read it; an
// unknown key returns false. A key seen twice fails the read.
func (r *mpReader) fields(field func(k []byte) (uint64, bool)) bool {
	n, ok := r.mapLen()
	if !ok {
		return false
	}
	var seen uint64
	for range n {
		k, ok := r.key()
		if !ok {
			return false
		}
		bit, ok := field(k)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return true
}

// readPtr reads a pointer field: nil, or a new value read by read, as the
// library sets a nil pointer.
func readPtr[T any](r *mpReader, p **T, read func(*mpReader, *T) bool) bool {
	if r.null() {
		*p = nil
		return true
	}
	*p = new(T)
	return read(r, *p)
}

// readSlice reads a slice field as the library does: nil for nil, an
// empty slice (not nil) for an empty array. It allocates no more elements
// than bytes remain (each takes at least one), with or without the walk.
func readSlice[T any](r *mpReader, read func(*mpReader, *T) bool) ([]T, bool) {
	if r.null() {
		return nil, true
	}
	n, ok := r.arrayLen()
	if !ok || !r.need(n) {
		return nil, false
	}
	s := make([]T, n)
	for i := range s {
		if !read(r, &s[i]) {
			return nil, false
		}
	}
	return s, true
}

// mpReader reads msgpack values off b from i; each read returns false on
// a value of another type, leaving the rest to the library.
type mpReader struct {
	b []byte
	i int
}

// need reports whether n more bytes follow i.
func (r *mpReader) need(n int) bool { return n >= 0 && len(r.b)-r.i >= n }

// null consumes a nil, if one is next.
func (r *mpReader) null() bool {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		return true
	}
	return false
}

// length reads a map, array or string header: fixed codes below fix (its
// low bits the length), or the 8/16/32-bit codes c8, c16, c32 (0 = none).
func (r *mpReader) length(fix, mask, c8, c16, c32 byte) (int, bool) {
	if !r.need(1) {
		return 0, false
	}
	c := r.b[r.i]
	r.i++
	switch {
	case c&^mask == fix:
		return int(c & mask), true
	case c == c8 && c8 != 0 && r.need(1):
		r.i++
		return int(r.b[r.i-1]), true
	case c == c16 && r.need(2):
		r.i += 2
		return int(binary.BigEndian.Uint16(r.b[r.i-2:])), true
	case c == c32 && r.need(4):
		r.i += 4
		return int(binary.BigEndian.Uint32(r.b[r.i-4:])), true
	}
	return 0, false
}

func (r *mpReader) mapLen() (int, bool)   { return r.length(0x80, 0x0f, 0, 0xde, 0xdf) }
func (r *mpReader) arrayLen() (int, bool) { return r.length(0x90, 0x0f, 0, 0xdc, 0xdd) }

// key reads a map key (a str) without copying it.
func (r *mpReader) key() ([]byte, bool) {
	n, ok := r.length(0xa0, 0x1f, 0xd9, 0xda, 0xdb)
	if !ok || !r.need(n) {
		return nil, false
	}
	r.i += n
	return r.b[r.i-n : r.i], true
}

// str reads a str (nil is ""). The values every event repeats (streams,
// phases) are the package's constants, not copies.
func (r *mpReader) str() (string, bool) {
	if r.null() {
		return "", true
	}
	b, ok := r.key()
	if !ok {
		return "", false
	}
	switch string(b) {
	case "":
		return "", true
	case StreamLifecycle:
		return StreamLifecycle, true
	case StreamAssistant:
		return StreamAssistant, true
	case StreamFinal:
		return StreamFinal, true
	case StreamAttempt:
		return StreamAttempt, true
	case StreamTool:
		return StreamTool, true
	case PhaseStart:
		return PhaseStart, true
	case PhaseEnd:
		return PhaseEnd, true
	}
	return string(b), true
}

func (r *mpReader) bool() (bool, bool) {
	if !r.need(1) {
		return false, false
	}
	switch r.b[r.i] {
	case 0xc2, 0xc0:
		r.i++
		return false, true
	case 0xc3:
		r.i++
		return true, true
	}
	return false, false
}

// int64 reads an integer of any msgpack width as the library's DecodeInt64
// does (nil is 0).
func (r *mpReader) int64() (int64, bool) {
	if !r.need(1) {
		return 0, false
	}
	c := r.b[r.i]
	r.i++
	if c <= 0x7f || c >= 0xe0 {
		return int64(int8(c)), true
	}
	var size int
	switch c {
	case 0xc0:
		return 0, true
	case 0xcc, 0xd0:
		size = 1
	case 0xcd, 0xd1:
		size = 2
	case 0xce, 0xd2:
		size = 4
	case 0xcf, 0xd3:
		size = 8
	default:
		return 0, false
	}
	if !r.need(size) {
		return 0, false
	}
	b := r.b[r.i : r.i+size]
	r.i += size
	switch c {
	case 0xcc:
		return int64(b[0]), true
	case 0xd0:
		return int64(int8(b[0])), true
	case 0xcd:
		return int64(binary.BigEndian.Uint16(b)), true
	case 0xd1:
		return int64(int16(binary.BigEndian.Uint16(b))), true
	case 0xce:
		return int64(binary.BigEndian.Uint32(b)), true
	case 0xd2:
		return int64(int32(binary.BigEndian.Uint32(b))), true
	default:
		return int64(binary.BigEndian.Uint64(b)), true
	}
}

// float64 reads a float64 or float32 (what the library reads into a
// float64 besides integers, which are left to it).
func (r *mpReader) float64() (float64, bool) {
	switch {
	case r.need(9) && r.b[r.i] == 0xcb:
		r.i += 9
		return math.Float64frombits(binary.BigEndian.Uint64(r.b[r.i-8:])), true
	case r.need(5) && r.b[r.i] == 0xca:
		r.i += 5
		return float64(math.Float32frombits(binary.BigEndian.Uint32(r.b[r.i-4:]))), true
	}
	return 0, false
}

// The set methods (and setInt) read a field's value into *p for a fields
// callback and return bit with whether they read it.

func (r *mpReader) setStr(p *string, bit uint64) (uint64, bool) {
	v, ok := r.str()
	*p = v
	return bit, ok
}

func (r *mpReader) setBool(p *bool, bit uint64) (uint64, bool) {
	v, ok := r.bool()
	*p = v
	return bit, ok
}

// setInt reads an integer of any width into a Go int, int64 or uint64,
// converted as the library converts it.
func setInt[T int | int64 | uint64](r *mpReader, p *T, bit uint64) (uint64, bool) {
	v, ok := r.int64()
	*p = T(v)
	return bit, ok
}

func (r *mpReader) setFloat64(p *float64, bit uint64) (uint64, bool) {
	v, ok := r.float64()
	*p = v
	return bit, ok
}
