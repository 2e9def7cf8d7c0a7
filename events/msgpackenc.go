package events

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// A turn publishes half a dozen events and writes its final event into its
// record; encoded by the msgpack library, each one cost about forty heap
// allocations, most of them its omitempty check boxing every field into an
// interface. appendEvent writes the same bytes by hand, with no allocation
// beyond its buffer. TestAppendEventAsLibrary fills every field of every
// type an event holds (new ones too, by reflection) and compares the bytes
// with the library's.

// appendEvent appends e's msgpack encoding, byte for byte what
// msgpack.Encoder (map keys sorted) writes for it, to b. ok is false, and b
// unchanged, when e holds a value of its own type (Data.Args or
// Data.Payload): those are left to the library.
func appendEvent(b []byte, e *Event) (_ []byte, ok bool) {
	if e.Data.Args != nil || e.Data.Payload != nil {
		return b, false
	}
	m := beginMap(b)
	b = m.str(b, "v")
	b = appendInt(b, int64(e.V))
	b = m.str(b, "runId")
	b = appendStr(b, e.RunID)
	b = m.str(b, "sessionKey")
	b = appendStr(b, e.SessionKey)
	b = m.str(b, "seq")
	b = appendUint64(b, e.Seq)
	if e.Attempt != 0 {
		b = m.str(b, "attempt")
		b = appendInt(b, int64(e.Attempt))
	}
	b = m.str(b, "stream")
	b = appendStr(b, e.Stream)
	b = m.str(b, "ts")
	b = appendInt64(b, e.TS)
	b = m.str(b, "data")
	b = appendEventData(b, &e.Data)
	return m.end(b), true
}

func appendEventData(b []byte, d *EventData) []byte {
	m := beginMap(b)
	b = m.optStr(b, "phase", d.Phase)
	b = m.optStr(b, "text", d.Text)
	b = m.optStr(b, "delta", d.Delta)
	b = m.optInt64(b, "startedAt", d.StartedAt)
	b = m.optInt64(b, "endedAt", d.EndedAt)
	b = m.optStr(b, "error", d.Error)
	b = m.optStr(b, "worker", d.Worker)
	b = m.optStr(b, "tenant", d.Tenant)
	b = m.optStr(b, "parentSession", d.ParentSession)
	b = m.optStr(b, "parentRun", d.ParentRun)
	b = m.optInt(b, "attempt", d.Attempt)
	b = m.optInt(b, "steps", d.Steps)
	b = m.optUint64(b, "inboundSeq", d.InboundSeq)
	b = m.optStr(b, "name", d.Name)
	b = m.optStr(b, "toolCallId", d.ToolCallID)
	// args: nil here (appendEvent leaves events with args to the library).
	if d.Result != nil {
		b = m.str(b, "result")
		b = appendResult(b, d.Result)
	}
	b = m.optBool(b, "willRetry", d.WillRetry)
	b = m.optBool(b, "isError", d.IsError)
	// payload: nil here, as args.
	b = m.optInt64(b, "delayMs", d.DelayMs)
	b = m.optInt(b, "maxAttempts", d.MaxAttempts)
	b = m.optStr(b, "provider", d.Provider)
	b = m.optStr(b, "model", d.Model)
	b = m.optStr(b, "authProfile", d.AuthProfile)
	b = m.optInt(b, "hop", d.Hop)
	b = m.optStr(b, "reason", d.Reason)
	return m.end(b)
}

func appendResult(b []byte, r *Result) []byte {
	m := beginMap(b)
	if len(r.Payloads) > 0 {
		b = m.str(b, "payloads")
		b = appendArrayLen(b, len(r.Payloads))
		for i := range r.Payloads {
			p := &r.Payloads[i]
			pm := beginMap(b)
			b = pm.optStr(b, "text", p.Text)
			b = pm.optBool(b, "isError", p.IsError)
			b = pm.end(b)
		}
	}
	b = m.str(b, "meta")
	b = appendMeta(b, &r.Meta)
	return m.end(b)
}

func appendMeta(b []byte, x *Meta) []byte {
	m := beginMap(b)
	b = m.str(b, "durationMs")
	b = appendInt64(b, x.DurationMs)
	b = m.optBool(b, "aborted", x.Aborted)
	if a := x.AgentMeta; a != nil {
		b = m.str(b, "agentMeta")
		am := beginMap(b)
		b = am.str(b, "sessionId")
		b = appendStr(b, a.SessionID)
		b = am.str(b, "provider")
		b = appendStr(b, a.Provider)
		b = am.str(b, "model")
		b = appendStr(b, a.Model)
		b = am.optInt(b, "compactionCount", a.CompactionCount)
		b = am.optInt64(b, "promptTokens", a.PromptTokens)
		b = am.optUsage(b, "usage", a.Usage)
		b = am.optUsage(b, "lastCallUsage", a.LastCallUsage)
		b = am.end(b)
	}
	if x.Error != nil {
		b = m.str(b, "error")
		em := beginMap(b)
		b = em.str(b, "kind")
		b = appendStr(b, x.Error.Kind)
		b = em.str(b, "message")
		b = appendStr(b, x.Error.Message)
		b = em.end(b)
	}
	b = m.optStr(b, "stopReason", x.StopReason)
	if len(x.PendingToolCalls) > 0 {
		b = m.str(b, "pendingToolCalls")
		b = appendArrayLen(b, len(x.PendingToolCalls))
		for i := range x.PendingToolCalls {
			c := &x.PendingToolCalls[i]
			cm := beginMap(b)
			b = cm.str(b, "id")
			b = appendStr(b, c.ID)
			b = cm.str(b, "name")
			b = appendStr(b, c.Name)
			b = cm.str(b, "arguments")
			b = appendStr(b, c.Arguments)
			b = cm.optBool(b, "approval", c.Approval)
			b = cm.end(b)
		}
	}
	b = m.optStr(b, "mergedInto", x.MergedInto)
	if len(x.Consumed) > 0 {
		b = m.str(b, "consumed")
		b = appendArrayLen(b, len(x.Consumed))
		for i := range x.Consumed {
			c := &x.Consumed[i]
			cm := beginMap(b)
			b = cm.str(b, "runId")
			b = appendStr(b, c.RunID)
			b = cm.optStr(b, "kind", c.Kind)
			b = cm.optStr(b, "reason", c.Reason)
			b = cm.end(b)
		}
	}
	b = m.optBool(b, "heartbeatOk", x.HeartbeatOK)
	if x.Session != nil {
		b = m.str(b, "session")
		b = appendSessionState(b, x.Session)
	}
	b = m.optInt(b, "waiting", x.Waiting)
	return m.end(b)
}

func appendSessionState(b []byte, s *SessionState) []byte {
	m := beginMap(b)
	b = m.optStr(b, "authProfile", s.AuthProfile)
	b = m.optUsage(b, "usage", s.Usage)
	b = m.optInt64(b, "turns", s.Turns)
	if len(s.Approvals) > 0 {
		b = m.str(b, "approvals")
		b = appendArrayLen(b, len(s.Approvals))
		for i := range s.Approvals {
			a := &s.Approvals[i]
			am := beginMap(b)
			b = am.str(b, "id")
			b = appendStr(b, a.ID)
			b = am.str(b, "name")
			b = appendStr(b, a.Name)
			b = am.end(b)
		}
	}
	if p := s.Parent; p != nil {
		b = m.str(b, "parent")
		pm := beginMap(b)
		b = pm.str(b, "session")
		b = appendStr(b, p.Session)
		b = pm.str(b, "run")
		b = appendStr(b, p.Run)
		b = pm.optStr(b, "label", p.Label)
		b = pm.optStr(b, "nonce", p.Nonce)
		if len(p.Ancestors) > 0 {
			b = pm.str(b, "ancestors")
			b = appendArrayLen(b, len(p.Ancestors))
			for _, a := range p.Ancestors {
				b = appendStr(b, a)
			}
		}
		b = pm.optBool(b, "delivered", p.Delivered)
		b = pm.optStr(b, "seal", p.Seal)
		b = pm.end(b)
	}
	if len(s.Children) > 0 {
		b = m.str(b, "children")
		b = appendArrayLen(b, len(s.Children))
		for i := range s.Children {
			c := &s.Children[i]
			cm := beginMap(b)
			b = cm.str(b, "session")
			b = appendStr(b, c.Session)
			b = cm.str(b, "run")
			b = appendStr(b, c.Run)
			b = cm.str(b, "parentRun")
			b = appendStr(b, c.ParentRun)
			b = cm.optStr(b, "label", c.Label)
			b = cm.optInt64(b, "spawned", c.Spawned)
			b = cm.optBool(b, "stopped", c.Stopped)
			b = cm.end(b)
		}
	}
	b = m.optUsage(b, "childUsage", s.ChildUsage)
	return m.end(b)
}

func appendUsage(b []byte, u *UsageMeta) []byte {
	m := beginMap(b)
	b = m.optInt64(b, "input", u.Input)
	b = m.optInt64(b, "output", u.Output)
	b = m.optInt64(b, "cacheRead", u.CacheRead)
	b = m.optInt64(b, "cacheWrite", u.CacheWrite)
	b = m.optInt64(b, "total", u.Total)
	if c := u.Cost; c != nil {
		b = m.str(b, "cost")
		cm := beginMap(b)
		b = cm.optFloat64(b, "input", c.Input)
		b = cm.optFloat64(b, "output", c.Output)
		b = cm.optFloat64(b, "cacheRead", c.CacheRead)
		b = cm.optFloat64(b, "cacheWrite", c.CacheWrite)
		b = cm.optFloat64(b, "total", c.Total)
		b = cm.end(b)
	}
	return m.end(b)
}

// mapHead is a struct's map being appended: where its header goes and how
// many fields it has so far. beginMap leaves three bytes for the header
// (map16, for a struct of 16 fields or more); end writes it and, for a
// fixmap, moves the fields back over the two bytes it does not need.
type mapHead struct{ at, n int }

func beginMap(b []byte) mapHead { return mapHead{at: len(b)} }

// str appends a field's key; the three header bytes go in before the first.
func (m *mapHead) str(b []byte, key string) []byte {
	if m.n == 0 {
		b = append(b, 0, 0, 0)
	}
	m.n++
	return appendStr(b, key)
}

func (m *mapHead) end(b []byte) []byte {
	if m.n == 0 {
		return append(b, 0x80)
	}
	if m.n < 16 {
		b[m.at] = 0x80 | byte(m.n)
		return append(b[:m.at+1], b[m.at+3:]...)
	}
	b[m.at] = 0xde
	binary.BigEndian.PutUint16(b[m.at+1:], uint16(m.n))
	return b
}

// The opt* methods append a field unless it is empty (omitempty).

func (m *mapHead) optStr(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendStr(m.str(b, key), v)
}

func (m *mapHead) optBool(b []byte, key string, v bool) []byte {
	if !v {
		return b
	}
	return append(m.str(b, key), 0xc3)
}

// optInt is a Go int: the library writes it in its shortest form.
func (m *mapHead) optInt(b []byte, key string, v int) []byte {
	if v == 0 {
		return b
	}
	return appendInt(m.str(b, key), int64(v))
}

// optInt64 is a Go int64: the library writes it in nine bytes.
func (m *mapHead) optInt64(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return appendInt64(m.str(b, key), v)
}

func (m *mapHead) optUint64(b []byte, key string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendUint64(m.str(b, key), v)
}

func (m *mapHead) optFloat64(b []byte, key string, v float64) []byte {
	if v == 0 {
		return b
	}
	b = append(m.str(b, key), 0xcb)
	return binary.BigEndian.AppendUint64(b, math.Float64bits(v))
}

func (m *mapHead) optUsage(b []byte, key string, u *UsageMeta) []byte {
	if u == nil {
		return b
	}
	return appendUsage(m.str(b, key), u)
}

// appendStr is the library's EncodeString.
func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xda)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

// appendArrayLen is the library's EncodeArrayLen.
func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

// appendInt is the library's EncodeInt: the shortest form.
func appendInt(b []byte, n int64) []byte {
	if n >= 0 {
		switch {
		case n <= math.MaxInt8:
			return append(b, byte(n))
		case n <= math.MaxUint8:
			return append(b, 0xcc, byte(n))
		case n <= math.MaxUint16:
			return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
		case n <= math.MaxUint32:
			return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
		default:
			return binary.BigEndian.AppendUint64(append(b, 0xcf), uint64(n))
		}
	}
	switch {
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	default:
		return appendInt64(b, n)
	}
}

// appendInt64 is the library's EncodeInt64: nine bytes.
func appendInt64(b []byte, n int64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

// appendUint64 is the library's EncodeUint64: nine bytes.
func appendUint64(b []byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
}

// AppendInbound appends in's msgpack encoding to b: byte for byte what
// msgpack.Marshal writes for it (EncodeInbound's bytes, without setting
// V), so hashes of it stay what they were. The usual message (text,
// images, the per-message choices) is written by hand; a message with
// tools, tool results, settings or sub-agent fields goes through the
// library.
func AppendInbound(b []byte, in *Inbound) ([]byte, error) {
	if out, ok := appendInbound(b, in); ok {
		return out, nil
	}
	var buf bytes.Buffer
	if err := msgpack.NewEncoder(&buf).Encode(in); err != nil {
		return b, fmt.Errorf("events: encode inbound: %w", err)
	}
	return append(b, buf.Bytes()...), nil
}

// appendInbound is AppendInbound's hand-written path; ok is false, b
// unchanged, for a message it leaves to the library.
func appendInbound(b []byte, in *Inbound) (_ []byte, ok bool) {
	if len(in.Tools) > 0 || len(in.ToolResults) > 0 || in.QueueSettings != nil || in.RunSettings != nil || in.Parent != nil || in.Subagent != nil {
		return b, false
	}
	m := beginMap(b)
	b = m.optInt(b, "v", in.V)
	b = m.optStr(b, "id", in.ID)
	b = m.optStr(b, "session", in.Session)
	b = m.optStr(b, "text", in.Text)
	if len(in.Images) > 0 {
		b = m.str(b, "images")
		b = appendArrayLen(b, len(in.Images))
		for i := range in.Images {
			im := &in.Images[i]
			mm := beginMap(b)
			b = mm.str(b, "mimeType")
			b = appendStr(b, im.MimeType)
			b = mm.str(b, "data")
			b = appendStr(b, im.Data)
			b = mm.end(b)
		}
	}
	b = m.optStr(b, "mode", in.Mode)
	b = m.optStr(b, "model", in.Model)
	b = m.optStr(b, "thinking", in.Thinking)
	b = m.optInt64(b, "sent", in.Sent)
	b = m.optStr(b, "authProfile", in.AuthProfile)
	b = m.optBool(b, "stop", in.Stop)
	b = m.optBool(b, "heartbeat", in.Heartbeat)
	return m.end(b), true
}
